"""What the HTTP bench's profile showed and what was changed for it: the fixed part of
its docs/benchmarks.md section (the figures beside it are measured on each run)."""

FINDINGS = """
### What the profile showed, and what was changed

- **Intake's token and fund lookups** were two ORM queries whose SQL Django compiles anew
  on every request: about 3 ms per request under cProfile, a fifth of the request and
  more than the service's own Python. `ApiToken.authenticate`
  (dashboard/tenancy/models.py) now reads the token and its tenant's funds in one SQL
  statement written once: one query per intake request instead of two (on PostgreSQL
  also one round trip instead of two).
- **`with_retry`** built a tenacity `Retrying` and a `Random` seeded from the OS for every
  DynamoDB call and ran each call inside tenacity's loop (about 0.4 ms per request under
  cProfile). The first attempt now runs bare; the loop starts only after a transient
  failure, with the same waits, counts and budget (reconciliation/dynamo/retry.py).
- **The staff pages' middleware ran on every API request**: sessions and the anonymous
  user loaded to find nobody signed in, a message store, a time zone activated, the
  idle-timeout, second-factor and staff-session checks and whitenoise's lookup.
  Measured in-process with the service stubbed (Django's own CPU per intake POST,
  medians of 9 rounds on a shared machine): 2.59 ms before, 1.99 ms with the staff
  middleware skipped on `/api/` (`dashboard/staff_only.py`). API answers keep every
  security header and no longer say `Vary: Cookie`. What is left of Django's share: the
  Redis rate-limit call (about a fifth), the token query, body parsing, URL resolving,
  and django-csp building its header from the settings for each answer (about a tenth;
  left to the library rather than copied to save it).
- **DynamoDB Local spent more CPU per HTTP-fed request** (4.2 ms against 3.5 ms)
  because the raw twin did not write the same items: its pledge lacked the keys of the
  pledges table's three indexes (`day_shard` for `by_day`, `ack_shard` and `ack_due_at`
  for `acks_due`, `donor_key` for `by_donor_key`), so DynamoDB Local kept three index
  entries per new pledge for the service and none for the raw side, and its claim cached
  a 60-byte answer where the service caches the whole pledge. The raw side now writes
  the service's items (`bench/_http_raw.py`, `bench/intake.py` · `_business_items`), so
  the ratio compares the HTTP stack alone; runs before 2026-12-05's evening compared the
  lighter raw items and read lower for that reason too. Each HTTP replay's request-log
  entry (batched 25 to a BatchWriteItem) still has no raw twin: about 0.55 ms of the
  JVM's CPU per entry, 0.1 ms per request of the 80/20 mix.
- Looked at and left: no database read but the token's happens on an API request;
  JSON and logging stay under 0.3 ms per request under cProfile; boto3 clients are built
  once per process and region (`reconciliation/dynamo/client.py`, a pool of 64
  connections for 8 threads per worker); the hooks on the service's client (metrics,
  attempts, failed writes, call counting) add at most 0.05 ms per request.
- Staff pages: Django's template rendering (about a quarter of a page's CPU) and botocore
  parsing the 50-row Query page (about a fifth) lead; each page makes the DynamoDB calls
  it shows (queue page: the page Query and the counters' BatchGetItem; case page: case,
  claim, pledge, ledger and audit trail), and four SQL queries (session, user, time
  zone, role groups). The SLA filter parses `QUEUE_SLA_HOURS` for each row (about 2 %
  of a queue page): left as it is.
- Staff pages under load, 2026-12-05: the bench's staff now read each page (a second on
  average) before opening the next, as people do; before, eight clients asking as fast
  as they could measured the queueing of a saturated machine. The targets are still
  missed, and the two tables above say why: with the intake clients stopped, a queue,
  case or pledge page's median is 28–51 ms; with eight intake clients running flat out
  (about 150 requests/s, each about 10 ms of CPU across gunicorn and DynamoDB Local) the
  same pages wait 3–5× longer for the two cores, in the same gunicorn processes as the
  intake threads. A page's own CPU, measured in-process with one thread and 2,000 open
  cases: queue page 21 ms, case page 13 ms, pledge page 11 ms, worklist 154 ms (177 ms
  before `clock.parse_iso` read the stored instant with `fromisoformat`, about 50× faster
  than `strptime`, for two instants per open case).
- The worklist is the one page slow even alone (166 ms median): it reads every open case
  of every queue (up to 500 a queue) to order them and total them per currency, and
  botocore parsing those 2,000 rows is about 40 % of its CPU, their decoding 15 %.
  Reading only the first page's rows (the oldest 51 of each queue, merged) with the
  totals from the queue counters would make it as cheap as a queue page for the default
  order; left for a later change, as the totals then need the counters to leave the
  drill's cases out exactly as the list does.
- What meets the targets under this load is isolation, not a cheaper page: staff pages
  served by processes of their own (a second gunicorn behind the load balancer's path
  rule for `/api/`), so a flat-out intake load cannot take their cores. Not done here.
- `Server-Timing` (dashboard/server_timing.py) now tells signed-in staff and API callers
  each answer's DynamoDB calls and their time (a client hook and a per-request tally:
  a context variable and two clock reads); this bench reads it.
"""
