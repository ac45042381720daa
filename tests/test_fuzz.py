"""Input fuzzing with hypothesis: the intake API never answers 500 and never writes on a
rejected request, whatever the body, headers or key."""

from __future__ import annotations

import json
import string
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import audit_events, claims, pledges, sign_in

# Examples per fuzz test in ``make test``, and in its full-depth twin that ``make
# test-reliability`` runs. The strategies draw from small finite sets on every dimension
# the views branch on (4-7 queues, 4 export targets, 6 actions, 6-8 field names), so 50
# examples reach each value with near certainty (a given one of 4 targets is missed with
# probability (3/4)^50 < 1e-6); the twins keep exploring the long tail of odd values at
# 150. docs/testing.md.
FUZZ_EXAMPLES = 50
FUZZ_EXAMPLES_FULL = 150


def _depth(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def fuzz(**strategies):
    """``@given(**strategies)`` at ``FUZZ_EXAMPLES``; ``full_depth_twins`` below adds the
    same test at ``FUZZ_EXAMPLES_FULL``, marked ``reliability``."""

    def decorate(body):
        test = _depth(FUZZ_EXAMPLES)(given(**strategies)(body))
        test.fuzz_twin_of = (body, strategies)
        return test

    return decorate


def full_depth_twins(namespace: dict) -> None:
    """For each ``@fuzz`` test in ``namespace``, ``<name>_full_depth``: the same body and
    strategies at ``FUZZ_EXAMPLES_FULL`` examples, with the test's marks and ``reliability``."""
    for name, test in list(namespace.items()):
        if not hasattr(test, "fuzz_twin_of"):
            continue
        body, strategies = test.fuzz_twin_of
        twin_name = f"{name}_full_depth"
        twin_body = types.FunctionType(
            body.__code__, body.__globals__, twin_name, body.__defaults__, body.__closure__
        )
        twin_body.__doc__ = body.__doc__
        twin_body.__qualname__ = twin_name
        twin = _depth(FUZZ_EXAMPLES_FULL)(given(**strategies)(twin_body))
        twin.pytestmark = [*getattr(test, "pytestmark", []), pytest.mark.reliability.mark]
        namespace[twin_name] = twin


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
field_values = st.one_of(
    json_values,
    st.text(alphabet=string.digits + ".-+eE ", max_size=20),
    st.sampled_from(["25.00", "0", "-1", "1.005", "1e3", "USD", "usd", "XYZ", "D-1", "a@b.c"]),
)
bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={k: field_values for k in ("donor_ref", "fund", "amount", "currency", "extra")},
    ).map(json.dumps),
    json_values.map(json.dumps),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
)
keys = st.one_of(st.none(), st.text(max_size=300), st.sampled_from(["k", " k", "k" * 256]))


@pytest.mark.engines("moto")
@pytest.mark.django_db
@fuzz(body=bodies, key=keys, auth=st.sampled_from(["good", "none", "garbage"]))
def test_intake_never_500_and_rejected_requests_write_nothing(ddb, api, body, key, auth):
    """Any body, key and auth header: a 2xx/4xx answer (never 500); on 4xx nothing new is
    written to any table."""
    before = (len(pledges(ddb)), len(claims(ddb)))
    if auth == "none":
        api.client.defaults.pop("HTTP_AUTHORIZATION", None)
    token = {"good": api.token, "none": "", "garbage": "x" * 40}[auth]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key.encode("utf-8", "replace").decode("latin-1")
    response = api.client.post(
        "/api/v1/pledges", data=body, content_type="application/json", **headers
    )
    assert response.status_code in (200, 201, 400, 401, 409, 422), response.content
    if response.status_code >= 400:
        assert (len(pledges(ddb)), len(claims(ddb))) == before
        assert response.json()["error"]


@pytest.mark.engines("moto")
@pytest.mark.django_db
@fuzz(path=st.text(min_size=1, max_size=300))
def test_get_by_any_key_never_500(ddb, api, path):
    """GET /api/v1/pledges/<anything>: 200, 400 or 404, never 500."""
    from urllib.parse import quote

    response = api.client.get(
        f"/api/v1/pledges/{quote(path, safe='')}", HTTP_AUTHORIZATION=f"Bearer {api.token}"
    )
    assert response.status_code in (200, 400, 404)


query_text = st.one_of(
    st.text(max_size=60),
    st.sampled_from(
        [
            "",
            "0",
            "-1",
            "1e9",
            "NaN",
            "inf",
            "10.5",
            "9" * 40,
            "2026-13-40",
            "2026-11-29",
            "GENERAL",
            "<script>",
            "' OR 1=1",
            "\x00",
        ]
    ),
)


@pytest.fixture
def supervisor_client(db, client):
    sign_in(client, "supervisor", "fuzz-sup")
    return client


@pytest.mark.engines("moto")
@fuzz(
    queue=st.sampled_from(
        ["stuck", "ambiguous", "cancelled", "mismatch", "escalated", "approval", "nope"]
    ),
    params=st.dictionaries(
        st.sampled_from(
            ["fund", "min_amount", "min_age_h", "mine", "intent", "cursor", "limit", "page"]
        ),
        query_text,
        max_size=5,
    ),
    htmx=st.booleans(),
)
def test_queue_filters_and_cursor_never_500(ddb, supervisor_client, queue, params, htmx):
    """Any filter values or cursor on any queue: an answer that is not a 500, and GETs
    never write (no claim, pledge or case appears)."""
    from tests.helpers import cases

    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    clean = {k: v.replace("\x00", "") for k, v in params.items()}
    response = supervisor_client.get(f"/queues/{queue}/", clean, **headers)
    assert response.status_code in (200, 400, 404), response.status_code
    assert cases(ddb) == [] and claims(ddb) == []


@pytest.mark.engines("moto")
@fuzz(
    params=st.dictionaries(
        st.sampled_from(["since", "until", "actor", "action", "case_id", "intent_id", "cursor"]),
        query_text,
        max_size=5,
    )
)
def test_audit_search_filters_never_500(ddb, supervisor_client, params):
    """Any audit search filters or cursor: 200 or 400, never 500."""
    clean = {k: v.replace("\x00", "") for k, v in params.items()}
    response = supervisor_client.get("/audit/", clean)
    assert response.status_code in (200, 400), response.status_code


# --- every staff form and filter: odd input is a considered answer, never a 500 -

edge_text = st.one_of(
    query_text,
    st.sampled_from(
        [
            "1E-200",
            "1E+200",
            "0E-1000000",
            "1e999999999",
            "-0",
            "0001-01-01",
            "0001-01-03",
            "9999-12-31",
            "0001-01-01T00:00:00+05:00",
            "#COUNT#STUCK_PENDING",
            "#COUNT#STUCK_PENDING#0",
            "C-" + "A" * 3000,
            "é" * 1100,
            "GENERAL\n",
            "\u200b" * 10,
        ]
    ),
)


def answered(response) -> None:
    """A considered answer: no 5xx, and no server error page or traceback in the body."""
    assert response.status_code < 500, response.status_code
    body = b"" if response.streaming else response.content
    assert b"Server Error" not in body and b"Traceback" not in body


def strip_nul(values: dict) -> dict:
    """The test client cannot send NUL in form data; the server never sees it either."""
    return {
        k: [v.replace("\x00", "") for v in vs] if isinstance(vs, list) else vs.replace("\x00", "")
        for k, vs in values.items()
    }


@pytest.mark.engines("moto")
@fuzz(
    queue=st.sampled_from(["stuck", "ambiguous", "escalated", "approval"]),
    params=st.dictionaries(
        st.sampled_from(["fund", "min_amount", "min_age_h", "q", "mine", "cursor"]),
        edge_text,
        max_size=6,
    ),
    htmx=st.booleans(),
)
def test_queue_form_fields_never_500(ddb, supervisor_client, queue, params, htmx):
    """The queue filter form's own fields (fund, amounts, ages, intent search) with edge
    numbers, dates, counter ids and oversized text: never a 500."""
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    answered(supervisor_client.get(f"/queues/{queue}/", strip_nul(params), **headers))


audit_params = st.dictionaries(
    st.sampled_from(["since", "until", "actor", "action", "case_id", "intent_id", "format"]),
    edge_text,
    max_size=7,
)


@pytest.mark.engines("moto")
@fuzz(params=audit_params, where=st.sampled_from(["search", "csv", "jsonl", "background"]))
def test_audit_search_and_every_export_never_500(ddb, supervisor_client, params, where):
    """Audit search, both streamed exports and a background export, with any parameters:
    never a 500; a refused export starts nothing (no export event is written)."""
    params = strip_nul(params)
    before = audit_events(ddb, "EXPORT#")
    if where == "background":
        response = supervisor_client.post("/audit/exports/", params)
    else:
        url = {"search": "/audit/", "csv": "/audit/export.csv", "jsonl": "/audit/export.jsonl"}
        response = supervisor_client.get(url[where], params)
    answered(response)
    if response.streaming:
        b"".join(response.streaming_content)
    if response.status_code >= 400:
        assert audit_events(ddb, "EXPORT#") == before


@pytest.fixture
def one_case(ddb):
    from tests.reconciliation.factories import stuck_case

    return stuck_case("fuzz-case")


case_fields = st.dictionaries(
    st.sampled_from(
        [
            "disposition",
            "override",
            "reason_code",
            "reason_text",
            "seen_version",
            "action_id",
            "unassign",
            "request_id",
        ]
    ),
    st.one_of(
        edge_text,
        st.sampled_from(
            ["ESCALATE", "RELEASE_CLAIM", "EVIDENCE_CONFIRMS", "1", "0", "-1", "9" * 30]
        ),
    ),
    max_size=8,
)


@pytest.mark.engines("moto")
@fuzz(
    action=st.sampled_from(["dispose", "override", "assign", "approve", "reject", "evidence"]),
    fields=case_fields,
    real=st.booleans(),
    other_id=edge_text,
    htmx=st.booleans(),
)
def test_case_action_forms_never_500(
    ddb, supervisor_client, one_case, action, fields, real, other_id, htmx
):
    """Every case action form (and the evidence panel) with any fields, on a real case or
    on any id at all (counter items, oversized, unicode): never a 500."""
    from urllib.parse import quote

    case_id = one_case.case_id if real else quote(other_id.replace("\x00", ""), safe="") or "x"
    path = f"/cases/{case_id}/{action}/"
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    if action == "evidence":
        answered(supervisor_client.get(path, **headers))
        answered(supervisor_client.get(f"/cases/{case_id}/", **headers))
    else:
        answered(supervisor_client.post(path, strip_nul(fields), **headers))


@pytest.mark.engines("moto")
@fuzz(
    fields=case_fields,
    step=st.sampled_from(["preview", "apply", "", "nope"]),
    queue=edge_text,
    ids=st.lists(edge_text, max_size=5),
    include_real=st.booleans(),
)
def test_bulk_form_never_500(
    ddb, supervisor_client, one_case, fields, step, queue, ids, include_real
):
    """The bulk form with any fields and any list of case ids (real ones among counter
    items, oversized and unicode ids): never a 500."""
    data = {**fields, "step": step, "queue": queue}
    data["case_ids"] = [*([one_case.case_id] if include_real else []), *ids]
    answered(supervisor_client.post("/cases/bulk/", strip_nul(data), HTTP_HX_REQUEST="true"))


full_depth_twins(globals())
