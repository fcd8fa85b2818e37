"""StoreResult.ids of a store_many stream: a compact array that reads like a list of ids and None."""

from __future__ import annotations

import sys

from memoria_pg.ingest import Ids


def test_ids_read_like_a_list_with_none_for_duplicates():
    ids = Ids([5, None, 7])
    ids.extend([None, 9])
    assert ids == [5, None, 7, None, 9] and list(ids) == [5, None, 7, None, 9]
    assert len(ids) == 5 and ids[1] is None and ids[-1] == 9 and ids[1:3] == [None, 7]
    assert ids.count(None) == 2 and 7 in ids and ids.index(9) == 4
    assert ids != [5, None, 7] and ids != "5"


def test_ids_take_eight_bytes_each():
    n = 100_000
    ids = Ids(range(1, n + 1))
    as_list = list(range(1, n + 1))
    compact = sys.getsizeof(ids._values)
    listed = sys.getsizeof(as_list) + sum(sys.getsizeof(i) for i in as_list)
    assert compact < 9 * n < listed / 3
