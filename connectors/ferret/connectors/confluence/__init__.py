"""Confluence Data Center source: pages with space and page permissions (needs ferret[confluence])."""
