# fmt: off
# ruff: noqa: E501
"""The ``__init__`` of each record quick_init makes, compiled with the package rather than at import.

Written by ``durable_nb.model.records.write_inits()``; not edited by hand (a test holds it equal to
what the records make). Each function takes the names its text uses and returns the ``__init__``.
"""

from collections.abc import Callable
from typing import Any

__all__ = ["FACTORIES"]

FACTORIES: dict[str, Callable[..., Any]]


# durable_nb.model.commits.Commit
def _0(_FACTORY, _default10, _default11, _default12, _default14, _default4, _default6, _default7, _default8, _default9, _factory1, _factory13, _factory15, _factory2, _factory3, _factory5, _set0, _set1, _set10, _set11, _set12, _set13, _set14, _set15, _set2, _set3, _set4, _set5, _set6, _set7, _set8, _set9):
    def __init__(self, run_id, checkpoints=_FACTORY, blobs=_FACTORY, events=_FACTORY, run=_default4, open_interrupts=_FACTORY, claim=_default6, claim_gate=_default7, release_interrupts=_default8, status_after_claim=_default9, expect_status=_default10, expect_owner=_default11, expect_head_seq=_default12, idempotent=_FACTORY, seen=_default14, writes=_FACTORY) -> None:
        _set0(self, run_id)
        _set1(self, _factory1() if checkpoints is _FACTORY else checkpoints)
        _set2(self, _factory2() if blobs is _FACTORY else blobs)
        _set3(self, _factory3() if events is _FACTORY else events)
        _set4(self, run)
        _set5(self, _factory5() if open_interrupts is _FACTORY else open_interrupts)
        _set6(self, claim)
        _set7(self, claim_gate)
        _set8(self, release_interrupts)
        _set9(self, status_after_claim)
        _set10(self, expect_status)
        _set11(self, expect_owner)
        _set12(self, expect_head_seq)
        _set13(self, _factory13() if idempotent is _FACTORY else idempotent)
        _set14(self, seen)
        _set15(self, _factory15() if writes is _FACTORY else writes)

    return __init__


# durable_nb.model.commits.CommitResult
def _1(_FACTORY, _default2, _set0, _set1, _set2):
    def __init__(self, run, checkpoints, claimed=_default2) -> None:
        _set0(self, run)
        _set1(self, checkpoints)
        _set2(self, claimed)

    return __init__


# durable_nb.model.commits.NewRun
def _2(_FACTORY, _default10, _default6, _default7, _default8, _default9, _factory11, _factory12, _factory13, _factory5, _set0, _set1, _set10, _set11, _set12, _set13, _set2, _set3, _set4, _set5, _set6, _set7, _set8, _set9):
    def __init__(self, run_id, name, kind, status, input_manifest, blobs=_FACTORY, idempotency_key=_default6, parent_run_id=_default7, parent_checkpoint_id=_default8, owner=_default9, lease_until=_default10, meta=_FACTORY, checkpoints=_FACTORY, events=_FACTORY) -> None:
        _set0(self, run_id)
        _set1(self, name)
        _set2(self, kind)
        _set3(self, status)
        _set4(self, input_manifest)
        _set5(self, _factory5() if blobs is _FACTORY else blobs)
        _set6(self, idempotency_key)
        _set7(self, parent_run_id)
        _set8(self, parent_checkpoint_id)
        _set9(self, owner)
        _set10(self, lease_until)
        _set11(self, _factory11() if meta is _FACTORY else meta)
        _set12(self, _factory12() if checkpoints is _FACTORY else checkpoints)
        _set13(self, _factory13() if events is _FACTORY else events)

    return __init__


# durable_nb.model.commits.RunUpdate
def _3(_FACTORY, _default0, _default1, _default2, _default3, _default4, _set0, _set1, _set2, _set3, _set4):
    def __init__(self, status=_default0, error=_default1, error_type=_default2, owner=_default3, lease_until=_default4) -> None:
        _set0(self, status)
        _set1(self, error)
        _set2(self, error_type)
        _set3(self, owner)
        _set4(self, lease_until)

    return __init__


# durable_nb.model.records.Blob
def _4(_FACTORY, _default3, _default4, _default5, _set0, _set1, _set2, _set3, _set4, _set5):
    def __init__(self, hash, codec, data, read_digest=_default3, parts=_default4, seal=_default5) -> None:
        _set0(self, hash)
        _set1(self, codec)
        _set2(self, data)
        _set3(self, read_digest)
        _set4(self, parts)
        _set5(self, seal)

    return __init__


# durable_nb.model.records.CheckpointDraft
def _5(_FACTORY, _default11, _default12, _default13, _default14, _default15, _default16, _default17, _default18, _default19, _default20, _default21, _default24, _default25, _default26, _default8, _factory10, _factory22, _factory23, _factory27, _factory4, _factory5, _factory6, _factory7, _factory9, _set0, _set1, _set10, _set11, _set12, _set13, _set14, _set15, _set16, _set17, _set18, _set19, _set2, _set20, _set21, _set22, _set23, _set24, _set25, _set26, _set27, _set3, _set4, _set5, _set6, _set7, _set8, _set9):
    def __init__(self, checkpoint_id, step, node_id, status, queue=_FACTORY, changes=_FACTORY, completed_added=_FACTORY, completed_removed=_FACTORY, snapshot=_default8, skipped=_FACTORY, routes=_FACTORY, iteration=_default11, item_index=_default12, branch_key=_default13, parent_checkpoint_id=_default14, node_input=_default15, node_output=_default16, error=_default17, error_type=_default18, traceback=_default19, interrupt=_default20, decision=_default21, resumes=_FACTORY, counters=_FACTORY, agent_path=_default24, duration=_default25, attempts=_default26, extra=_FACTORY) -> None:
        _set0(self, checkpoint_id)
        _set1(self, step)
        _set2(self, node_id)
        _set3(self, status)
        _set4(self, _factory4() if queue is _FACTORY else queue)
        _set5(self, _factory5() if changes is _FACTORY else changes)
        _set6(self, _factory6() if completed_added is _FACTORY else completed_added)
        _set7(self, _factory7() if completed_removed is _FACTORY else completed_removed)
        _set8(self, snapshot)
        _set9(self, _factory9() if skipped is _FACTORY else skipped)
        _set10(self, _factory10() if routes is _FACTORY else routes)
        _set11(self, iteration)
        _set12(self, item_index)
        _set13(self, branch_key)
        _set14(self, parent_checkpoint_id)
        _set15(self, node_input)
        _set16(self, node_output)
        _set17(self, error)
        _set18(self, error_type)
        _set19(self, traceback)
        _set20(self, interrupt)
        _set21(self, decision)
        _set22(self, _factory22() if resumes is _FACTORY else resumes)
        _set23(self, _factory23() if counters is _FACTORY else counters)
        _set24(self, agent_path)
        _set25(self, duration)
        _set26(self, attempts)
        _set27(self, _factory27() if extra is _FACTORY else extra)

    return __init__


# durable_nb.model.records.CheckpointRecord
def _6(_FACTORY, _default11, _default12, _default13, _default14, _default15, _default16, _default17, _default18, _default19, _default20, _default21, _default24, _default25, _default26, _default8, _factory10, _factory22, _factory23, _factory27, _factory4, _factory5, _factory6, _factory7, _factory9, _set0, _set1, _set10, _set11, _set12, _set13, _set14, _set15, _set16, _set17, _set18, _set19, _set2, _set20, _set21, _set22, _set23, _set24, _set25, _set26, _set27, _set28, _set29, _set3, _set30, _set4, _set5, _set6, _set7, _set8, _set9):
    def __init__(self, checkpoint_id, step, node_id, status, queue=_FACTORY, changes=_FACTORY, completed_added=_FACTORY, completed_removed=_FACTORY, snapshot=_default8, skipped=_FACTORY, routes=_FACTORY, iteration=_default11, item_index=_default12, branch_key=_default13, parent_checkpoint_id=_default14, node_input=_default15, node_output=_default16, error=_default17, error_type=_default18, traceback=_default19, interrupt=_default20, decision=_default21, resumes=_FACTORY, counters=_FACTORY, agent_path=_default24, duration=_default25, attempts=_default26, extra=_FACTORY, *, run_id, seq, created_at) -> None:
        _set0(self, checkpoint_id)
        _set1(self, step)
        _set2(self, node_id)
        _set3(self, status)
        _set4(self, _factory4() if queue is _FACTORY else queue)
        _set5(self, _factory5() if changes is _FACTORY else changes)
        _set6(self, _factory6() if completed_added is _FACTORY else completed_added)
        _set7(self, _factory7() if completed_removed is _FACTORY else completed_removed)
        _set8(self, snapshot)
        _set9(self, _factory9() if skipped is _FACTORY else skipped)
        _set10(self, _factory10() if routes is _FACTORY else routes)
        _set11(self, iteration)
        _set12(self, item_index)
        _set13(self, branch_key)
        _set14(self, parent_checkpoint_id)
        _set15(self, node_input)
        _set16(self, node_output)
        _set17(self, error)
        _set18(self, error_type)
        _set19(self, traceback)
        _set20(self, interrupt)
        _set21(self, decision)
        _set22(self, _factory22() if resumes is _FACTORY else resumes)
        _set23(self, _factory23() if counters is _FACTORY else counters)
        _set24(self, agent_path)
        _set25(self, duration)
        _set26(self, attempts)
        _set27(self, _factory27() if extra is _FACTORY else extra)
        _set28(self, run_id)
        _set29(self, seq)
        _set30(self, created_at)

    return __init__


# durable_nb.model.records.CheckpointState
def _7(_FACTORY, _default2, _set0, _set1, _set2):
    def __init__(self, manifest, completed, since_snapshot=_default2) -> None:
        _set0(self, manifest)
        _set1(self, completed)
        _set2(self, since_snapshot)

    return __init__


# durable_nb.model.records.NewEvent
def _8(_FACTORY, _default1, _factory2, _set0, _set1, _set2):
    def __init__(self, type, node_id=_default1, data=_FACTORY) -> None:
        _set0(self, type)
        _set1(self, node_id)
        _set2(self, _factory2() if data is _FACTORY else data)

    return __init__


# durable_nb.model.records.RunRecord
def _9(_FACTORY, _default10, _default11, _default12, _default13, _default14, _default15, _default7, _default8, _default9, _factory16, _set0, _set1, _set10, _set11, _set12, _set13, _set14, _set15, _set16, _set2, _set3, _set4, _set5, _set6, _set7, _set8, _set9):
    def __init__(self, run_id, name, kind, status, created_at, updated_at, input_manifest, error=_default7, error_type=_default8, idempotency_key=_default9, parent_run_id=_default10, parent_checkpoint_id=_default11, owner=_default12, lease_until=_default13, head_seq=_default14, event_seq=_default15, meta=_FACTORY) -> None:
        _set0(self, run_id)
        _set1(self, name)
        _set2(self, kind)
        _set3(self, status)
        _set4(self, created_at)
        _set5(self, updated_at)
        _set6(self, input_manifest)
        _set7(self, error)
        _set8(self, error_type)
        _set9(self, idempotency_key)
        _set10(self, parent_run_id)
        _set11(self, parent_checkpoint_id)
        _set12(self, owner)
        _set13(self, lease_until)
        _set14(self, head_seq)
        _set15(self, event_seq)
        _set16(self, _factory16() if meta is _FACTORY else meta)

    return __init__


# durable_nb.store.blob_files.FileBlob
def _10(_FACTORY, _default3, _default4, _default5, _default6, _default7, _set0, _set1, _set2, _set3, _set4, _set5, _set6, _set7):
    def __init__(self, hash, codec, data, read_digest=_default3, parts=_default4, seal=_default5, path=_default6, stored_size=_default7) -> None:
        _set0(self, hash)
        _set1(self, codec)
        _set2(self, data)
        _set3(self, read_digest)
        _set4(self, parts)
        _set5(self, seal)
        _set6(self, path)
        _set7(self, stored_size)

    return __init__


FACTORIES = {
    'def __init__(self, run_id, checkpoints=_FACTORY, blobs=_FACTORY, events=_FACTORY, run=_default4, open_interrupts=_FACTORY, claim=_default6, claim_gate=_default7, release_interrupts=_default8, status_after_claim=_default9, expect_status=_default10, expect_owner=_default11, expect_head_seq=_default12, idempotent=_FACTORY, seen=_default14, writes=_FACTORY) -> None:\n    _set0(self, run_id)\n    _set1(self, _factory1() if checkpoints is _FACTORY else checkpoints)\n    _set2(self, _factory2() if blobs is _FACTORY else blobs)\n    _set3(self, _factory3() if events is _FACTORY else events)\n    _set4(self, run)\n    _set5(self, _factory5() if open_interrupts is _FACTORY else open_interrupts)\n    _set6(self, claim)\n    _set7(self, claim_gate)\n    _set8(self, release_interrupts)\n    _set9(self, status_after_claim)\n    _set10(self, expect_status)\n    _set11(self, expect_owner)\n    _set12(self, expect_head_seq)\n    _set13(self, _factory13() if idempotent is _FACTORY else idempotent)\n    _set14(self, seen)\n    _set15(self, _factory15() if writes is _FACTORY else writes)\n\n': _0,
    'def __init__(self, run, checkpoints, claimed=_default2) -> None:\n    _set0(self, run)\n    _set1(self, checkpoints)\n    _set2(self, claimed)\n\n': _1,
    'def __init__(self, run_id, name, kind, status, input_manifest, blobs=_FACTORY, idempotency_key=_default6, parent_run_id=_default7, parent_checkpoint_id=_default8, owner=_default9, lease_until=_default10, meta=_FACTORY, checkpoints=_FACTORY, events=_FACTORY) -> None:\n    _set0(self, run_id)\n    _set1(self, name)\n    _set2(self, kind)\n    _set3(self, status)\n    _set4(self, input_manifest)\n    _set5(self, _factory5() if blobs is _FACTORY else blobs)\n    _set6(self, idempotency_key)\n    _set7(self, parent_run_id)\n    _set8(self, parent_checkpoint_id)\n    _set9(self, owner)\n    _set10(self, lease_until)\n    _set11(self, _factory11() if meta is _FACTORY else meta)\n    _set12(self, _factory12() if checkpoints is _FACTORY else checkpoints)\n    _set13(self, _factory13() if events is _FACTORY else events)\n\n': _2,
    'def __init__(self, status=_default0, error=_default1, error_type=_default2, owner=_default3, lease_until=_default4) -> None:\n    _set0(self, status)\n    _set1(self, error)\n    _set2(self, error_type)\n    _set3(self, owner)\n    _set4(self, lease_until)\n\n': _3,
    'def __init__(self, hash, codec, data, read_digest=_default3, parts=_default4, seal=_default5) -> None:\n    _set0(self, hash)\n    _set1(self, codec)\n    _set2(self, data)\n    _set3(self, read_digest)\n    _set4(self, parts)\n    _set5(self, seal)\n\n': _4,
    'def __init__(self, checkpoint_id, step, node_id, status, queue=_FACTORY, changes=_FACTORY, completed_added=_FACTORY, completed_removed=_FACTORY, snapshot=_default8, skipped=_FACTORY, routes=_FACTORY, iteration=_default11, item_index=_default12, branch_key=_default13, parent_checkpoint_id=_default14, node_input=_default15, node_output=_default16, error=_default17, error_type=_default18, traceback=_default19, interrupt=_default20, decision=_default21, resumes=_FACTORY, counters=_FACTORY, agent_path=_default24, duration=_default25, attempts=_default26, extra=_FACTORY) -> None:\n    _set0(self, checkpoint_id)\n    _set1(self, step)\n    _set2(self, node_id)\n    _set3(self, status)\n    _set4(self, _factory4() if queue is _FACTORY else queue)\n    _set5(self, _factory5() if changes is _FACTORY else changes)\n    _set6(self, _factory6() if completed_added is _FACTORY else completed_added)\n    _set7(self, _factory7() if completed_removed is _FACTORY else completed_removed)\n    _set8(self, snapshot)\n    _set9(self, _factory9() if skipped is _FACTORY else skipped)\n    _set10(self, _factory10() if routes is _FACTORY else routes)\n    _set11(self, iteration)\n    _set12(self, item_index)\n    _set13(self, branch_key)\n    _set14(self, parent_checkpoint_id)\n    _set15(self, node_input)\n    _set16(self, node_output)\n    _set17(self, error)\n    _set18(self, error_type)\n    _set19(self, traceback)\n    _set20(self, interrupt)\n    _set21(self, decision)\n    _set22(self, _factory22() if resumes is _FACTORY else resumes)\n    _set23(self, _factory23() if counters is _FACTORY else counters)\n    _set24(self, agent_path)\n    _set25(self, duration)\n    _set26(self, attempts)\n    _set27(self, _factory27() if extra is _FACTORY else extra)\n\n': _5,
    'def __init__(self, checkpoint_id, step, node_id, status, queue=_FACTORY, changes=_FACTORY, completed_added=_FACTORY, completed_removed=_FACTORY, snapshot=_default8, skipped=_FACTORY, routes=_FACTORY, iteration=_default11, item_index=_default12, branch_key=_default13, parent_checkpoint_id=_default14, node_input=_default15, node_output=_default16, error=_default17, error_type=_default18, traceback=_default19, interrupt=_default20, decision=_default21, resumes=_FACTORY, counters=_FACTORY, agent_path=_default24, duration=_default25, attempts=_default26, extra=_FACTORY, *, run_id, seq, created_at) -> None:\n    _set0(self, checkpoint_id)\n    _set1(self, step)\n    _set2(self, node_id)\n    _set3(self, status)\n    _set4(self, _factory4() if queue is _FACTORY else queue)\n    _set5(self, _factory5() if changes is _FACTORY else changes)\n    _set6(self, _factory6() if completed_added is _FACTORY else completed_added)\n    _set7(self, _factory7() if completed_removed is _FACTORY else completed_removed)\n    _set8(self, snapshot)\n    _set9(self, _factory9() if skipped is _FACTORY else skipped)\n    _set10(self, _factory10() if routes is _FACTORY else routes)\n    _set11(self, iteration)\n    _set12(self, item_index)\n    _set13(self, branch_key)\n    _set14(self, parent_checkpoint_id)\n    _set15(self, node_input)\n    _set16(self, node_output)\n    _set17(self, error)\n    _set18(self, error_type)\n    _set19(self, traceback)\n    _set20(self, interrupt)\n    _set21(self, decision)\n    _set22(self, _factory22() if resumes is _FACTORY else resumes)\n    _set23(self, _factory23() if counters is _FACTORY else counters)\n    _set24(self, agent_path)\n    _set25(self, duration)\n    _set26(self, attempts)\n    _set27(self, _factory27() if extra is _FACTORY else extra)\n    _set28(self, run_id)\n    _set29(self, seq)\n    _set30(self, created_at)\n\n': _6,
    'def __init__(self, manifest, completed, since_snapshot=_default2) -> None:\n    _set0(self, manifest)\n    _set1(self, completed)\n    _set2(self, since_snapshot)\n\n': _7,
    'def __init__(self, type, node_id=_default1, data=_FACTORY) -> None:\n    _set0(self, type)\n    _set1(self, node_id)\n    _set2(self, _factory2() if data is _FACTORY else data)\n\n': _8,
    'def __init__(self, run_id, name, kind, status, created_at, updated_at, input_manifest, error=_default7, error_type=_default8, idempotency_key=_default9, parent_run_id=_default10, parent_checkpoint_id=_default11, owner=_default12, lease_until=_default13, head_seq=_default14, event_seq=_default15, meta=_FACTORY) -> None:\n    _set0(self, run_id)\n    _set1(self, name)\n    _set2(self, kind)\n    _set3(self, status)\n    _set4(self, created_at)\n    _set5(self, updated_at)\n    _set6(self, input_manifest)\n    _set7(self, error)\n    _set8(self, error_type)\n    _set9(self, idempotency_key)\n    _set10(self, parent_run_id)\n    _set11(self, parent_checkpoint_id)\n    _set12(self, owner)\n    _set13(self, lease_until)\n    _set14(self, head_seq)\n    _set15(self, event_seq)\n    _set16(self, _factory16() if meta is _FACTORY else meta)\n\n': _9,
    'def __init__(self, hash, codec, data, read_digest=_default3, parts=_default4, seal=_default5, path=_default6, stored_size=_default7) -> None:\n    _set0(self, hash)\n    _set1(self, codec)\n    _set2(self, data)\n    _set3(self, read_digest)\n    _set4(self, parts)\n    _set5(self, seal)\n    _set6(self, path)\n    _set7(self, stored_size)\n\n': _10,
}
