"""Simulated nodes get distinct GPUs (mlops/runtime/devices.py): pure assignment, no GPU needed."""

from mlops.runtime.devices import assign, visible_gpus


def _ranks(nodes: int, per: int) -> list[dict[str, str]]:
    return [{"RANK": str(r), "LOCAL_RANK": str(r % per), "NODE_RANK": str(r // per)}
            for r in range(nodes * per)]


def test_each_simulated_node_sees_its_own_slice_and_local_rank_indexes_it():
    overlays, notice = assign(_ranks(2, 2), ["0", "1", "2", "3"])
    assert [o["CUDA_VISIBLE_DEVICES"] for o in overlays] == ["0,1", "0,1", "2,3", "2,3"]
    assert [o["LOCAL_RANK"] for o in overlays] == ["0", "1", "0", "1"]  # Azure's values, kept
    assert notice == ""


def test_more_gpus_than_processes_leaves_the_rest_unused_and_user_ids_are_kept():
    overlays, _ = assign(_ranks(2, 1), ["GPU-a", "GPU-b", "GPU-c"])
    assert [o["CUDA_VISIBLE_DEVICES"] for o in overlays] == ["GPU-a", "GPU-b"]


def test_fewer_gpus_than_processes_hides_them_with_a_notice():
    overlays, notice = assign(_ranks(2, 2), ["0", "1"])
    assert {o["CUDA_VISIBLE_DEVICES"] for o in overlays} == {""}
    assert "4 processes but 2 GPU(s)" in notice and "gloo" in notice


def test_no_gpu_or_one_process_changes_nothing():
    ranks = _ranks(2, 1)
    assert assign(ranks, []) == (ranks, "")
    assert assign(_ranks(1, 1), ["0"]) == (_ranks(1, 1), "")


def test_mpi_node_ranks_and_tensorflow_processes_are_grouped_too():
    mpi = [{"OMPI_COMM_WORLD_NODE_RANK": str(r // 2)} for r in range(4)]
    assert [o["CUDA_VISIBLE_DEVICES"] for o in assign(mpi, list("0123"))[0]] == \
        ["0,1", "0,1", "2,3", "2,3"]
    tf = [{"TF_CONFIG": "{}"}, {"TF_CONFIG": "{}"}]  # no node rank: one device each
    assert [o["CUDA_VISIBLE_DEVICES"] for o in assign(tf, ["0", "1"])[0]] == ["0", "1"]


def test_visible_gpus_honours_the_users_mask_then_the_driver(tmp_path):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 7"}, tmp_path) == ["2", "7"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) == []
    assert visible_gpus({}, tmp_path / "absent") == []
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / bus).mkdir()
    assert visible_gpus({}, tmp_path) == ["0", "1"]
