"""A batch's slots as the time-major columns the learner trains on, with part-filled slots packed
together (VER's sequence packing, Wijmans et al. 2022; --pack_sequences).

ver's slots come back part-filled: a rollout ends mid-slot, and the rows finished before the actions
in flight at its close are learned where they lie. APPO's do too when an agent leaves its env early.
A column costs the learner's forward and backward passes the same whether its rows hold samples or
padding (ver on synthetic_heterogeneous, 2 workers x 8 envs, batch 512, rollout 32: 53% of the rows
held a sample), so the segments are packed into fewer columns.

A segment is a slot's rows from its first learned sample to its last. Packed, it keeps its rows in
order and is followed by one row that holds only its bootstrap observation (not valid, done), as a
truncated episode's final row does (vtrace.py): GAE and V-trace bootstrap the segment's last step
from that row's value and nothing flows into the next segment. The recurrent state at a segment's
first row, and at each row where the slot's BPTT chunks start, is the state the acting policy stored
there (model.forward_sequence takes it at every row of `state_starts`).
"""

from __future__ import annotations

import bisect

import numpy as np
import torch

# what a row without a sample holds in the step tensors (the others keep any row's values: the loss
# masks them)
NO_SAMPLE = {
    "valid": False,
    "dones": True,
    "rewards": 0.0,
    "discounted_returns": 0.0,
    "policy_version": -1,
}


def segments(valid: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slot column, first row, length) of each slot's span of learned samples, from slot-major
    valid [B, T]; slots without one are left out."""
    rows = np.arange(valid.shape[1])
    valid = valid.numpy()
    has = valid.any(1)
    first = np.where(valid, rows, valid.shape[1]).min(1)
    end = np.where(valid, rows, -1).max(1) + 1
    return np.flatnonzero(has), first[has], (end - first)[has]


def place(lengths: np.ndarray, rollout: int) -> tuple[list[tuple[int, int]], int]:
    """Best-fit decreasing: a (column, first row) per segment, each taking its length plus one
    bootstrap row of a column's rollout + 1 rows; and the number of columns."""
    placed: list[tuple[int, int]] = [(0, 0)] * len(lengths)
    # (rows left, column), sorted
    free: list[tuple[int, int]] = []
    columns = 0
    for s in np.argsort(-lengths, kind="stable"):
        need = int(lengths[s]) + 1
        i = bisect.bisect_left(free, (need, -1))
        if i == len(free):
            left = rollout + 1
            column = columns
            columns += 1
        else:
            left, column = free.pop(i)
        placed[s] = (column, rollout + 1 - left)
        if left > need:
            bisect.insort(free, (left - need, column))
    return placed, columns


def column_per_slot(slots: dict[str, torch.Tensor], bptt: int) -> dict[str, torch.Tensor]:
    """Slot-major [B, T(+1), ...] as time-major [T(+1), B, ...]; the stored recurrent states start
    each BPTT chunk."""
    out = {k: v.transpose(0, 1).contiguous() for k, v in slots.items()}
    num_slots, rollout = slots["valid"].shape
    out["state_starts"] = (
        (torch.arange(rollout) % bptt == 0)[:, None].expand(rollout, num_slots).contiguous()
    )
    return out


def sources(placed, cols, first, lengths, rollout: int, columns: int, bptt: int):
    """Per packed row: the slot column and row it copies ([T+1, C]; padding copies a bootstrap row),
    whether it holds a segment's step, and whether the recurrent state starts from the stored one
    there ([T, C] each)."""
    src_row = np.full((rollout + 1, columns), rollout)
    src_col = np.zeros((rollout + 1, columns), dtype=np.int64)
    is_step = np.zeros((rollout, columns), bool)
    starts = np.zeros((rollout, columns), bool)
    for place, slot_column, first_row, length in zip(placed, cols, first, lengths):
        # the segment's rows go to rows at..at+length of packed column `column`
        column, at = place
        src_row[at : at + length + 1, column] = np.arange(first_row, first_row + length + 1)
        src_col[at : at + length + 1, column] = slot_column
        is_step[at : at + length, column] = True
        starts[at : at + length, column] = np.arange(first_row, first_row + length) % bptt == 0
        starts[at, column] = True
    return src_row, src_col, is_step, starts


def time_major(
    slots: dict[str, torch.Tensor], bptt: int, pack: bool, min_columns: int = 1
) -> dict[str, torch.Tensor]:
    """Slot-major gathered tensors [B, T(+1 for obs), ...] as time-major [T(+1), C, ...] with
    `state_starts` [T, C] (rows where the recurrent state is the stored one), packed if `pack` and
    it saves a column. Packing keeps at least `min_columns` (one per minibatch: an empty one would
    still take an optimizer step)."""
    num_slots, rollout = slots["valid"].shape
    if not pack:
        return column_per_slot(slots, bptt)
    cols, first, lengths = segments(slots["valid"])
    placed, columns = place(lengths, rollout)
    if not min_columns <= columns < num_slots:
        return column_per_slot(slots, bptt)
    src_row, src_col, is_step, starts = sources(
        placed, cols, first, lengths, rollout, columns, bptt
    )
    out = {}
    for name, tensor in slots.items():
        # T, or T + 1 for obs
        rows = tensor.shape[1]
        index = torch.from_numpy(
            src_col[:rows] * rows + np.minimum(src_row[:rows], rows - 1)
        ).flatten()
        out[name] = (
            tensor.flatten(0, 1).index_select(0, index).view(rows, columns, *tensor.shape[2:])
        )
    no_sample = torch.from_numpy(~is_step)
    for name in NO_SAMPLE.keys() & out.keys():
        out[name][no_sample] = NO_SAMPLE[name]
    out["state_starts"] = torch.from_numpy(starts)
    return out
