"""Who calls the API: tenants, their tokens, funds and acknowledgement endpoints. Not a
face: the API authenticates with it, the staff pages show it, /admin/ and the operators'
commands change it (docs/architecture.md)."""
