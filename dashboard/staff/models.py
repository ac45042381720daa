"""The staff pages' own rows in Django's database: notifications about cases and saved
worklist views (the cases themselves live in DynamoDB)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from reconciliation.audit.models import AuditAction
from reconciliation.codes import Code


class NotificationKind(Code):
    """Why a person is told about a case (docs/notes-and-notifications.md)."""

    ASSIGNED = "assigned_to_you", "Assigned to you", "Someone else assigned you a case."
    APPROVAL_WAITING = (
        "approval_waiting",
        "Approval waiting for you",
        "An override was requested; a supervisor other than the requester must decide it.",
    )
    OVERRIDE_DECIDED = (
        "override_decided",
        "Your override was decided",
        "An override you requested was approved, rejected or expired.",
    )
    MENTION = "mentioned", "Mentioned you", "Someone wrote @your-name in a note on a case."


class NotificationQuerySet(models.QuerySet["Notification"]):
    def unread(self) -> NotificationQuerySet:
        """What is new to its recipient: not opened, and not about a request another
        supervisor has decided since (nothing is left to do about it)."""
        return self.filter(read_at__isnull=True, settled_by_action="")


class Notification(models.Model):
    """One thing one person is told about one case, kept in Django's database (the case
    lives in DynamoDB). Read state is per person: opening it or "mark all read" sets
    ``read_at``. Created by dashboard/staff/notifications.py after the action succeeded."""

    recipient = models.ForeignKey(
        "auth.User", on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=32, choices=[(k.value, k.label) for k in NotificationKind])
    case_id = models.CharField(max_length=200)
    # Who caused it ("system" for an expiry), what they did (an AuditAction) and, for an
    # override, which (an Override code); for a mention, the start of the note.
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=40)
    override = models.CharField(max_length=40, blank=True, default="")
    excerpt = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)
    # An approval waiting: the request it is about, and once that request is decided
    # (approved, rejected, expired: an AuditAction) how and by whom, for every recipient
    # alike. A request decided is no longer "new" to the supervisors who did not decide
    # it; ``read_at`` stays what each person did.
    request_id = models.CharField(max_length=64, blank=True, default="")
    settled_by_action = models.CharField(max_length=40, blank=True, default="")
    settled_by = models.CharField(max_length=150, blank=True, default="")

    objects = NotificationQuerySet.as_manager()

    class Meta:
        db_table = "dashboard_notification"
        indexes = [
            # The badge's count: one range of this index per page.
            models.Index(fields=["recipient", "read_at"], name="notification_unread"),
            # The list, newest first.
            models.Index(fields=["recipient", "-created_at"], name="notification_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.recipient}: {self.kind_code.label} on {self.case_id}"

    @property
    def kind_code(self) -> NotificationKind:
        return NotificationKind(self.kind)

    @property
    def is_unread(self) -> bool:
        return self.read_at is None and not self.is_settled

    @property
    def is_settled(self) -> bool:
        """An approval waiting whose request has been decided."""
        return bool(self.settled_by_action)

    @property
    def settled(self) -> str:
        """How the request this approval was waiting on was decided, in words."""
        return AuditAction.words(self.settled_by_action) if self.is_settled else ""

    @property
    def decision(self) -> str:
        """How an override was decided (approved, rejected, expired); empty otherwise."""
        if self.kind != NotificationKind.OVERRIDE_DECIDED:
            return ""
        return AuditAction.words(self.action)


class SavedView(models.Model):
    """A worklist view a staff member saved: a name and the worklist's query string (its
    filters and order, checked against the worklist's form when saved). The link is the
    share: anyone who may see the worklist opens the same filters (docs/worklist.md)."""

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="saved_views")
    name = models.CharField(max_length=80)
    query = models.CharField(max_length=2000, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "dashboard_savedview"
        ordering = ("name",)
        constraints = [
            models.UniqueConstraint(fields=("user", "name"), name="saved_view_name_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.name}"
