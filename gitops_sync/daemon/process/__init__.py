"""The process both controllers run in: options, the fenced client and the components around the work."""
