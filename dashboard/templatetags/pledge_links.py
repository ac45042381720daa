"""``{% pledge_url tenant key %}``: the pledge page's link (dashboard/staff/links.py);
Django's ``{% url %}`` leaves ``/``, ``.`` and ``..`` in a key as they are."""

from __future__ import annotations

from django import template

from dashboard.staff import links

register = template.Library()


@register.simple_tag
def pledge_url(tenant: str, key: str) -> str:
    return links.pledge_url(tenant, key)
