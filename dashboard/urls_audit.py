"""URLs of the audit screens (search, export, downloads)."""

urlpatterns: list = []
