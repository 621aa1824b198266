"""SMB source: files of a Windows or Samba share with their DACLs as principals (needs ferret[smb])."""
