"""``manage.py add_staff USERNAME --role ROLE [--password P]``: create or update a staff user."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from reconciliation.actors import STAFF_ROLES


class Command(BaseCommand):
    help = "Create or update a staff user in exactly one role group."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=[str(r) for r in STAFF_ROLES])
        parser.add_argument("--password", help="default: a random one, printed once")
        parser.add_argument("--email", default="")

    @transaction.atomic
    def handle(self, *args, username: str, role: str, password: str | None, email: str, **opts):
        username = username.strip()
        if not username or len(username) > 150:
            raise CommandError("USERNAME must be 1-150 characters")
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=username)
        generated = password is None and (created or not user.has_usable_password())
        if generated:
            password = secrets.token_urlsafe(12)
        if password is not None:
            user.set_password(password)
        if email:
            user.email = email
        user.is_active = True
        user.save()
        for name in STAFF_ROLES:
            Group.objects.get_or_create(name=str(name))
        user.groups.remove(*Group.objects.filter(name__in=[str(r) for r in STAFF_ROLES]))
        user.groups.add(Group.objects.get(name=role))
        verb = "created" if created else "updated"
        self.stdout.write(f"{verb} {username} in group {role}")
        if generated:
            self.stdout.write(f"password for {username}: {password}")
