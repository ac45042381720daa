"""URLs of the staff screens: overview, queues, cases, approvals."""

urlpatterns: list = []
