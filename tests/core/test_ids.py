"""Job ids: ULIDs in Crockford base32, sortable by creation time, monotonic in a process."""

from __future__ import annotations

import base64
import random

from blamequeue._ids import _encode, new_id, new_job_id, new_job_ids

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def reference(value: int) -> str:
    # The textbook spelling through the standard library, as an oracle.
    rfc = base64.b32encode(value.to_bytes(20, "big")).decode("ascii")[6:]
    return rfc.translate(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", CROCKFORD))


def test_encoding_matches_the_reference_spelling() -> None:
    rng = random.Random(7)
    values = [0, 1, (1 << 128) - 1, 1 << 127] + [rng.getrandbits(128) for _ in range(2000)]
    for value in values:
        assert _encode(value) == reference(value)


def test_ids_are_26_crockford_digits_after_the_prefix() -> None:
    job_id = new_job_id()
    assert job_id.startswith("job-")
    assert len(job_id) == 30
    assert set(job_id[4:]) <= set(CROCKFORD)


def test_ids_increase_strictly_within_a_process() -> None:
    ids = [new_id() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_a_batch_of_ids_continues_the_sequence() -> None:
    before = new_job_id()
    batch = new_job_ids(1000)
    after = new_job_id()
    assert [before, *batch, after] == sorted({before, *batch, after})
    assert len(set(batch)) == 1000


def test_a_batch_spells_each_id_as_one_at_a_time_would() -> None:
    # Batches cross runs of 1024 values (where the head changes) wherever they start.
    for count in (1, 2, 1023, 1024, 1025, 3000):
        batch = new_job_ids(count)
        assert len(batch) == count
        first = int.from_bytes(base64.b32decode(_to_rfc(batch[0][4:])), "big")
        assert batch == ["job-" + reference(first + offset) for offset in range(count)]


def _to_rfc(digits: str) -> bytes:
    # Crockford digits back to RFC 4648 base32 (padded to whole bytes: 6 leading zero digits).
    table = str.maketrans(CROCKFORD, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
    return ("A" * 6 + digits.translate(table)).encode("ascii")
