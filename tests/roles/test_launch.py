"""What a launch decides before any process starts: the cores each role gets."""


def test_core_plan_gives_a_cpu_learner_cores_of_its_own():
    from asyncrl.core.processes import plan_cores

    titles = [
        "asyncrl-learner-0",
        "asyncrl-policy-0",
        "asyncrl-rollout-0",
        "asyncrl-rollout-1",
        "asyncrl-rollout-2",
    ]
    plan = plan_cores(titles, [0, 1], cpu_learning=True)
    assert plan["asyncrl-learner-0"] == [0] and plan["asyncrl-policy-0"] == [0, 1]
    assert all(plan[f"asyncrl-rollout-{w}"] == [1] for w in range(3))
    plan = plan_cores(titles, list(range(16)), cpu_learning=True)
    assert plan["asyncrl-learner-0"] == list(range(8)) and plan["asyncrl-policy-0"] == list(
        range(8, 16)
    )
    assert [plan[f"asyncrl-rollout-{w}"] for w in range(3)] == [[8], [9], [10]]
    # a GPU learns: workers spread over every core
    plan = plan_cores(titles, [0, 1, 2, 3], cpu_learning=False)
    assert plan["asyncrl-learner-0"] == [0, 1, 2, 3] and [
        plan[f"asyncrl-rollout-{w}"] for w in range(3)
    ] == [
        [0],
        [1],
        [2],
    ]
    assert plan_cores(titles, [5], cpu_learning=True) == {t: [5] for t in titles}
