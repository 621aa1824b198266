"""An intranet web site: sitemap, robots.txt and conditional GET with httpx, text extracted by trafilatura."""
