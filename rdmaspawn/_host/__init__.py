"""The process and its interpreter as the host shows them (DEVELOPERS.md maps the modules)."""
