"""Staff accounts' own rows in Django's database: their settings and their signed-in
sessions as the profile page lists them."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class StaffProfile(models.Model):
    """A staff member's own settings: the time zone pages show times in."""

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="staff_profile")
    time_zone = models.CharField(max_length=64, default="UTC")

    class Meta:
        db_table = "dashboard_staffprofile"

    def __str__(self) -> str:
        return f"{self.user} ({self.time_zone})"


class StaffSession(models.Model):
    """A signed-in session as its owner sees it on the profile page (staff_sessions.py):
    the device and address it was opened from, when it was last seen.
    Only the SHA-256 of the session key is kept; the session itself is Django's row, and
    ending a session deletes that."""

    key_hash = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="staff_sessions")
    user_agent = models.CharField(max_length=300, blank=True, default="")
    address = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "dashboard_staffsession"

    def __str__(self) -> str:
        return f"{self.user} from {self.address or '?'}"
