"""SharePoint Online / OneDrive source through Microsoft Graph, with item permissions (needs ferret[sharepoint])."""
