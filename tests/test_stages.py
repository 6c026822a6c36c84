"""Stage records: written once, read back as the same type, an old layout refused."""

import json

import pytest

from glmflash.stages import ConfirmEval, Draws, TrainStage, VisionStage, load_stage, save_stage

RECORDS = [
    TrainStage({"steps": 3, "dev_loss": 1.5}, "run/checkpoints/step_000003", 12.5),
    ConfirmEval(
        checkpoint="c",
        ladder={"depth1": [1.0, 2], "unseen_depth2": [0.0, 2]},
        greedy_pass1_trained=[1.0, 3],
        passk_trained=[2.5, 3],
        passk_all=[4.0, 8],
        per_family_passk={"double": [1.0, 1]},
        per_family_samples={"double": [2, 2]},
        sampling=Draws(k=2, temperature=0.8, samples=2),
        examples=[{"name": "f_x", "status": "pass"}],
        wall_seconds=3.0,
    ),
    VisionStage([19, 20], [40, 40], 7.0),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_reads_back_as_itself(tmp_path, record):
    save_stage(tmp_path / "stage.json", record)
    assert load_stage(tmp_path / "stage.json", type(record)) == record
    assert not (tmp_path / "stage.tmp").exists()


def test_a_record_of_another_layout_is_refused(tmp_path):
    path = tmp_path / "stage.json"
    save_stage(path, RECORDS[1])
    data = json.loads(path.read_text())
    del data["sampling"]  # as written before the scores carried their sampling
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a ConfirmEval record.*remove the stage's folder"):
        load_stage(path, ConfirmEval)
    with pytest.raises(ValueError, match="not a VisionStage record"):
        load_stage(path, VisionStage)
