"""The tracer's pebble-game cost model: strategies, Knill's optimum, Revolve, the referee."""
import math
from collections import deque

import pytest

from rvm.trace import knill, revolve
from rvm.trace import strategies as S
from rvm.trace.pebble import BWD, COPY, FWD, IllegalMove, Move, play
from rvm.trace.report import model_report

# ---- the acceptance figures ------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 7, 100, 1000])
def test_bennett1973_takes_2n_minus_1_moves_with_n_pebbles(n):
    s = S.bennett1973(n)
    assert (s.moves, s.forward, s.backward, s.peak) == (2 * n - 1, n, n - 1, n)
    g = play(s.schedule(), n)
    assert (g.moves, g.peak, g.clean) == (2 * n - 1, n, True)


def test_bennett_k2_on_1024_steps():
    s = S.bennett(1024, k=2)
    assert s.params == {"k": 2, "levels": 10}
    assert (s.moves, s.peak) == (59049, 11)
    g = play(s.schedule(), 1024)
    assert (g.moves, g.forward, g.backward, g.peak, g.clean) == (59049, 29525, 29524, 11, True)


def test_bennett_k4_four_levels_on_256_steps():
    s = S.bennett(256, k=4, levels=4)
    assert (s.moves, s.forward, s.backward, s.peak) == (2401, 1201, 1200, 13)
    r = model_report(s)                     # also plays the schedule through the referee
    assert (r.peak_checkpoints, r.peak_states, r.checked, r.clean) == (13, 14, "game", True)


def test_knill_acceptance_values():
    assert knill.table(1024).moves(8, 4) == 25
    assert knill.table(1024).moves(1024, 11) == 27231
    for n, budget, moves in [(8, 4, 25), (1024, 11, 27231)]:
        s = S.knill(n, budget)
        assert (s.moves, s.peak) == (moves, budget)
        g = play(s.schedule(), n, budget=budget)
        assert (g.moves, g.peak, g.clean) == (moves, budget, True)


def test_bennett_power_formula():
    # N = k^L: (2k-1)^L moves with L(k-1)+1 pebbles
    for k, L in [(2, 1), (2, 5), (3, 3), (5, 2), (7, 2)]:
        s = S.bennett(k ** L, k, L)
        assert (s.moves, s.peak) == ((2 * k - 1) ** L, L * (k - 1) + 1)


# ---- Knill's table against a brute-force search of the game --------------------------------

def brute_force(n, budget):
    """Fewest moves from {0} to {0, n} with at most `budget` pebbles (BFS over pebble sets)."""
    goal = 1 << (n - 1)
    dist = {0: 0}
    queue = deque([0])
    while queue:
        u = queue.popleft()
        if u == goal:
            return dist[u]
        for i in range(1, n + 1):
            if i == 1 or u >> (i - 2) & 1:
                v = u ^ (1 << (i - 1))
                if v not in dist and bin(v).count("1") <= budget:
                    dist[v] = dist[u] + 1
                    queue.append(v)
    return None


def test_brute_force_agrees_with_the_knill_table_up_to_12():
    dense = knill.dense_table(12, 12)
    fast = knill.Table(12)
    for n in range(1, 13):
        for budget in range(1, n + 1):
            want = brute_force(n, budget)
            assert fast.moves(n, budget) == want, (n, budget)
            assert (None if dense[budget, n] < 0 else int(dense[budget, n])) == want


def test_fast_table_equals_the_recurrence():
    n_max, top = 160, 9
    dense = knill.dense_table(n_max, top)
    fast = knill.Table(n_max)
    for s in range(1, top + 1):
        for n in range(1, n_max + 1):
            d = int(dense[s, n])
            assert fast.moves(n, s) == (None if d < 0 else d), (n, s)


def test_large_budgets_use_the_closed_form_and_agree():
    n_max = 200
    built = [[], []]
    for s in range(2, n_max + 1):
        built.append(knill._next_level(built[-1], s, n_max))
    tab = knill.Table(n_max)
    for s in range(2, n_max + 1, 7):
        for n in range(2, n_max + 1, 3):
            if n > 1 << min(s - 1, 62):
                continue
            t, left = 1, n - 1
            for v, c in built[s]:
                d = min(c, left)
                t, left = t + v * d, left - d
            assert tab.moves(n, s) == t, (n, s)
    assert tab._stable is not None


def test_min_budget_and_infeasible():
    assert [knill.min_budget(n) for n in (1, 2, 3, 4, 5, 8, 9, 1024, 1025)] == \
        [1, 2, 3, 3, 4, 4, 5, 11, 12]
    assert knill.table(64).moves(9, 4) is None
    with pytest.raises(ValueError, match="at least 11 pebbles"):
        S.knill(1024, 10)


def test_knill_plans_are_optimal_within_budget():
    for n in range(1, 41):
        for budget in range(knill.min_budget(n), n + 2):
            s = S.knill(n, budget)
            p = s.plan()
            assert (p.moves, p.peak) == (s.moves, s.peak)
            g = play(s.schedule(), n, budget=budget)
            assert g.clean and g.moves == knill.table(n).moves(n, min(budget, n))


def test_knill_beats_or_ties_every_reversible_strategy_at_equal_space():
    n = 300
    tab = knill.table(n)
    for s in [S.bennett(n, k) for k in range(2, 9)] + [S.periodic(n, p) for p in (5, 17, 40)] \
            + [S.bennett(n, 3, levels=2)]:
        assert tab.moves(n, s.peak) <= s.moves, s.label


def test_million_steps_without_running_anything():
    n = 10 ** 6
    k2 = S.bennett(n, 2)
    opt = S.knill(n)
    assert k2.peak == opt.peak == 21
    assert opt.moves == 364543449 and opt.moves < k2.moves
    assert S.knill(n, n).moves == 2 * n - 1 == S.bennett1973(n).moves
    budgets = [21, 22, 25, 30, 40, 100, 1000, 10 ** 4, n]
    costs = [S.knill(n, b).moves for b in budgets]
    assert costs == sorted(costs, reverse=True)
    r = model_report(S.periodic(n))
    assert r.checked == "model" and r.peak_checkpoints == 1999 and r.gap == 1.0


# ---- plans, periodic, Revolve, the referee -------------------------------------------------

@pytest.mark.parametrize("k", [2, 3, 5])
def test_uneven_bennett_splits_play_clean(k):
    for n in range(1, 60):
        for levels in (None, 1, 2):
            s = S.bennett(n, k, levels)
            g = play(s.schedule(), n)
            assert (g.forward, g.backward, g.peak, g.clean) == \
                (s.forward, s.backward, s.peak, True), (n, levels)


def test_periodic_formula_matches_its_plan():
    for n in range(1, 70):
        for p in range(1, n + 2):
            s = S.periodic(n, p)
            plan = s.plan()
            assert (s.forward, s.backward, s.peak) == (plan.forward, plan.backward, plan.peak)
    s = S.periodic(64, 8)
    assert (s.moves, s.peak) == (225, 15)
    assert play(s.schedule(), 64).clean


def test_revolve_closed_form_matches_the_recursion():
    for l in range(1, 90):
        for c in range(1, 6):
            assert revolve.advances(l, c) == revolve.advances_dp(l, c), (l, c)
    assert revolve.advances(10, 1) == 45
    s = S.revolve(1000, 1000)              # every state stored: like Bennett 1973
    assert s.moves == 2 * 1000 - 1 and not s.reversible and not s.runnable
    with pytest.raises(ValueError, match="cost model only"):
        s.plan()


def test_referee_rejects_broken_rules():
    with pytest.raises(IllegalMove, match="s_1 is not pebbled"):
        play([Move(FWD, 2)], 3)
    with pytest.raises(IllegalMove, match="already pebbled"):
        play([Move(FWD, 1), Move(FWD, 1)], 3)
    with pytest.raises(IllegalMove, match="s_1 is not pebbled"):
        play([Move(FWD, 1), Move(FWD, 2), Move(BWD, 1), Move(BWD, 2)], 3)
    with pytest.raises(IllegalMove, match="over the budget"):
        play([Move(FWD, 1), Move(FWD, 2)], 2, budget=1)
    with pytest.raises(IllegalMove, match="copy out"):
        play([Move(FWD, 1), Move(COPY, 1)], 2)
    g = play([Move(FWD, 1), Move(FWD, 2), Move(COPY, 2)], 2)
    assert not g.clean and g.left == [1]
    assert play([Move(FWD, 1), Move(FWD, 2), Move(BWD, 1), Move(COPY, 2)], 2).clean


# ---- NiLang's ceil split -----------------------------------------------------------------------

def nilang_bennett(n: int, k: int) -> tuple[int, int, int]:
    """A replica of NiLang's `bennett` (NiLang.jl, src/stdlib/bennett.jl) over the set of
    positions held: `len` steps from `base` split into segments of ceil(len/k) steps,
    ceil(len/m) of them; run them all, then the segments but the last backward.  Returns
    (forward steps, backward steps, most states held besides s_0)."""
    held, count, peak = {0}, [0, 0], [0]

    def run(base: int, length: int, reverse: bool) -> None:
        if length == 1:
            if not reverse:
                assert base in held and base + 1 not in held
                held.add(base + 1)
                count[0] += 1
            else:
                assert base in held and base + 1 in held
                held.remove(base + 1)
                count[1] += 1
            peak[0] = max(peak[0], len(held) - 1)
            return
        m = math.ceil(length / k)
        nstep = math.ceil(length / m)
        calls = [(base + m * (j - 1), min(m, length - m * (j - 1)), False)
                 for j in range(1, nstep + 1)]
        calls += [(base + m * (j - 1), m, True) for j in range(nstep - 1, 0, -1)]
        if reverse:
            calls = [(b, ln, not r) for b, ln, r in reversed(calls)]
        for b, ln, r in calls:
            run(b, ln, r)

    run(0, n, False)
    assert held == {0, n}
    return count[0], count[1], peak[0]


def test_ceil_split_reproduces_nilang_847_moves_11_pebbles():
    assert nilang_bennett(100, 4) == (424, 423, 11)
    s = S.bennett(100, 4, split="ceil")
    assert (s.moves, s.forward, s.backward, s.peak) == (847, 424, 423, 11)
    assert s.params == {"k": 4, "levels": 4, "split": "ceil"}
    even = S.bennett(100, 4)
    assert (even.moves, even.peak) == (791, 10) and "split" not in even.params
    g = play(s.schedule(), 100)
    assert (g.forward, g.backward, g.peak, g.clean) == (424, 423, 11, True)


@pytest.mark.parametrize("k", [2, 3, 4, 7])
def test_ceil_split_agrees_with_the_nilang_replica(k):
    for n in range(1, 130):
        s = S.bennett(n, k, split="ceil")
        assert (s.forward, s.backward, s.peak) == nilang_bennett(n, k), n
        if n <= 40:
            assert play(s.schedule(), n).clean


def test_ceil_and_even_agree_on_powers_and_unknown_splits_fail():
    for k, L in ((2, 5), (3, 3), (4, 3)):
        a, b = S.bennett(k ** L, k), S.bennett(k ** L, k, split="ceil")
        assert (a.forward, a.backward, a.peak) == (b.forward, b.backward, b.peak)
    with pytest.raises(ValueError, match="unknown split"):
        S.bennett(10, 2, split="floor")


def test_revolve_peak_counts_slots_and_working_state_less_s0():
    """peak checkpoints = C (C slots holding s_0 among them, plus the working state, less
    s_0); peak states = C + 1; with more slots than steps only N are filled."""
    r = model_report(S.revolve(100, 5))
    assert (r.peak_checkpoints, r.peak_states) == (5, 6)
    r = model_report(S.revolve(10, 50))
    assert (r.peak_checkpoints, r.peak_states, r.moves) == (10, 11, 19)
