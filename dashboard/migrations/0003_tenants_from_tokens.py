"""Every tenant already named by an API token becomes a Tenant with ``DEFAULT_FUNDS``, so
an installation upgraded to registered funds keeps accepting its callers' pledges to
those funds (register the others with ``manage.py add_fund``)."""

from django.conf import settings
from django.db import migrations

from reconciliation.claims.funds import funds_spec_parse


def tenants_from_tokens(apps, schema_editor):
    api_token = apps.get_model("dashboard", "ApiToken")
    tenant_model = apps.get_model("dashboard", "Tenant")
    fund_model = apps.get_model("dashboard", "Fund")
    defaults = funds_spec_parse(
        settings.DEFAULT_FUNDS,
        default_currency=settings.FUND_DEFAULT_CURRENCY,
        default_max=settings.FUND_DEFAULT_MAX_AMOUNT,
    )
    names = api_token.objects.values_list("tenant", flat=True).distinct()
    for name in sorted(set(names)):
        tenant, created = tenant_model.objects.get_or_create(name=name)
        if not created:
            continue
        for fund in defaults:
            fund_model.objects.get_or_create(
                tenant=tenant,
                code=fund.code,
                currency=fund.currency,
                defaults={"max_amount": fund.max_amount},
            )


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0002_tenants_funds_profiles")]

    operations = [migrations.RunPython(tenants_from_tokens, migrations.RunPython.noop)]
