"""Ledger drift detection (docs/design.md §6 ``LEDGER_DRIFT``): a periodic
check that each fund's ledger equals its RECORDED pledges, per region and overall, at a
cost proportional to what changed since its last run.

Rules:

- Every pledge is one transaction: its pledge item, an ADD to one ledger shard of the
  region that wrote it, and its receipt (``PLEDGE_RECORDED``, seq 1 of the region's
  pledge stream); a void adds ``PLEDGE_VOIDED`` to that stream and subtracts from the
  same shard. So what changed since the last run is the receipts and voids in each
  region's ``audit_events.by_day`` index after the checkpoint's watermark (only the
  streams that region owns; replicas are dropped): one Query per day shard.
- Per region and ``fund#currency``: the ledger (its shards, read consistently) must equal
  the expected total, the checkpoint's plus the receipts less the voids since. A
  difference there is the ledger changing without a pledge (or a pledge without its
  ledger), and the case says so; it names no intent, since none explains it.
- Overall: the expected ledgers of every region must equal the sum of RECORDED pledges,
  kept by reading, for each intent that changed, its pledge item in its home region (in
  the region its stream names when the home has none). A receipt counts on the pledge
  side only in the region the pledge item's ``ledger_key`` names: after Global Tables'
  last writer wins, that is the one write the pledges table kept. A receipt of another
  region is the same intent recorded twice: ``dynamo_cross_region_duplicate_detected_total``
  counts it once per intent, and the overall case names it. A changed intent with no
  pledge item at all is named too.
- Whatever the cause, and under whatever names: a receipt found in a region whose stream
  names another region is a replica when that region holds the same event (same event
  id), and otherwise a *stray*, recorded here by a process that took this region for
  the other (a region map that differs between processes: docs/regions.md, "One
  configuration"). Two records of one intent under the *same* names (the untagged stream
  and ledger shard in two regions) look alike to every owner's read, so only this tells
  them apart. A stray counts on the ledger side (``strays``: its shard is one no
  region's own total reads) and on the pledge side only when it is the intent's one
  record; otherwise it is a duplicate, counted and named like any other.
- Settle window: receipts are stamped when the key was claimed (a retry under the same
  token is byte-identical), so one may land up to the 10-minute token window after its
  ``at``; the index is eventually consistent; replication takes its time. The watermark
  therefore stays ``LEDGER_DRIFT_SETTLE_S`` (default 15 min) behind now: each run reads
  from the watermark to now and compares with all of it, but keeps in the checkpoint only
  what is older than the new watermark (the rest is read again next run).
- Confirmation: a difference is read again after ``LEDGER_DRIFT_CONFIRM_MS`` (the whole
  window and the ledger). If anything of that fund moved meanwhile, it is left to the
  next run; a case opens only for a difference that held still. The duplicate counter
  moves only in the run whose checkpoint write wins.
- Reported once: while a scope's case is open, a difference equal to what its open cases
  report (or back to none: finance corrected it first) opens nothing; only what differs
  beyond them opens a new case, for that part. A case resolved as DRIFT_EXPLAINED makes
  its difference part of the scope's ``accepted`` offset for good; DRIFT_CORRECTED does
  not (finance made its own adjustment, so the ledger is expected to match again).
  Nothing here writes money.
- Checkpoint: one item in the first region's ledger table (``#DRIFT#CHECKPOINT``), written
  only if its version is still the one this run read, so of two concurrent runs one
  advances it; case ids derive from scope, fund, currency and that version, so the other
  run's openings are no-ops. Cases live in the first region (a region-wide finding).
- First sight: a ``fund#currency`` the checkpoint does not know yet (every one on the
  first run, which starts ``LEDGER_DRIFT_SETTLE_S`` back) is taken as right as read
  then: its baseline is the ledger less the changes read, kept only if the confirming
  read finds it did not move meanwhile (else it is taken on a later run). A drift older
  than its first sight is therefore not reported; a full read of the pledges table
  would, at the cost of every pledge, and is left to the drill.

Blind spots: a commit landing more than ``LEDGER_DRIFT_SETTLE_S`` after its receipt's
``at`` (a worker stalled that long and still fenced in) shows as a drift that no intent
explains; a fund written to on every run between the two reads is compared only on a
run where it is quiet; a duplicate whose winning region changes after it settled (only
with replication slower than the settle window) may be counted again.

The check's steps, one module each: ``read`` (the pledge changes of each region's
``by_day`` index, the strays among them, the ledger totals and the changed intents'
pledge items), ``compare`` (what each change adds to the pledge side, the totals each
side expects, the differences), ``confirm`` (the second read that leaves a moving fund
to the next run), ``checkpoint`` (what a run keeps for the next, and the differences
already reported), ``case`` (the LEDGER_DRIFT case of one finding) and ``check`` (one
run, step by step).
"""
