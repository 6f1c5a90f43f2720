"""The tiny random checkpoints, built once per test session (nothing downloads)."""

import pytest

from tests.checkpoints import stand_ins as ck


@pytest.fixture(scope="session")
def checkpoint_folders(tmp_path_factory):
    """{name: folder} of read-only checkpoints; keras-hub ones as (folder, the keras-hub model)."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        "hf_gpt2": ck.hf_gpt2_folder(root / "hf_gpt2"),
        "hf_gpt2_bare": ck.hf_gpt2_folder(root / "hf_gpt2_bare", seed=1, prefix=""),  # the `gpt2` repo's names
        "hf_bert_mlm": ck.hf_bert_folder(root / "hf_bert_mlm", "BertForMaskedLM"),
        "hf_bert_cls": ck.hf_bert_folder(root / "hf_bert_cls", "BertForSequenceClassification", num_labels=3),
        "hf_bert": ck.hf_bert_folder(root / "hf_bert", "BertModel"),
        "kh_gpt2": (root / "kh_gpt2", ck.keras_hub_gpt2_preset(root / "kh_gpt2")),
        "kh_bert_cls": (root / "kh_bert_cls", ck.keras_hub_bert_preset(root / "kh_bert_cls", "classifier")),
        "kh_bert": (root / "kh_bert", ck.keras_hub_bert_preset(root / "kh_bert", None, seed=2)),
    }
