"""The live dashboard page (index.html), served by GET /dashboard."""
