from conftest import AGENT, P1


def test_the_world_loads_and_counts_show(api):
    resp = api.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}")
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json()["cases"] == {"active": 2, "retired": 1}
