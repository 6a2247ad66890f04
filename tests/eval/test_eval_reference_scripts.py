"""The reference comparison scripts (eval/compare_*_reference.py): fast checks, no reference checkout."""

from __future__ import annotations

import importlib
import sys

import pytest

from tests import REPO_ROOT

EVAL = REPO_ROOT / "eval"


@pytest.fixture
def eval_scripts(monkeypatch):
    """Import eval/ scripts by name (as ``python eval/x.py`` would find them); sys.path and the modules a
    fake checkout adds are restored afterwards."""
    monkeypatch.setattr(sys, "path", [str(EVAL), *sys.path])
    before = set(sys.modules)
    yield importlib.import_module
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("llamagen", "scheduler", "autoregressive"):
            del sys.modules[name]


@pytest.mark.parametrize("script, first_missing", [
    ("compare_sjd_reference", "llamagen/llamagen.py"),
    ("compare_llamagen_reference", "autoregressive/models/gpt.py"),
])
def test_a_folder_that_is_not_a_checkout_is_refused(tmp_path, eval_scripts, script, first_missing):
    module = eval_scripts(script)
    (tmp_path / "README.md").write_text("not a checkout")
    with pytest.raises(ValueError, match=f"--reference-repo: .* has no {first_missing}"):
        module.main(["--reference-repo", str(tmp_path), "--model", "c2i"])
    with pytest.raises(ValueError, match="--reference-repo: .* is not a folder"):
        module.main(["--reference-repo", str(tmp_path / "README.md"), "--model", "c2i"])


def test_sjd_script_names_the_first_missing_file_of_a_partial_checkout(tmp_path, eval_scripts):
    module = eval_scripts("compare_sjd_reference")
    (tmp_path / "llamagen").mkdir()
    for name in ("llamagen.py", "llamagen_solver.py"):
        (tmp_path / "llamagen" / name).write_text("")
    with pytest.raises(ValueError, match="no scheduler/jacobi_iteration_lumina_mgpt.py .*T2I-AR-with-SJD"):
        module.main(["--reference-repo", str(tmp_path)])


def test_sjd_shim_reaches_only_the_reference_modules(tmp_path, eval_scripts):
    """The shim's promise: their modules see the old names; transformers and torch are left as they were."""
    import torch
    import transformers
    import transformers.generation.logits_process as hf_logits_process

    module = eval_scripts("compare_sjd_reference")
    files = {
        "llamagen/llamagen.py": "",
        "llamagen/llamagen_solver.py": "import transformers\n"
                                       "from transformers.generation.logits_process import LogitsWarper\n",
        "scheduler/jacobi_iteration_lumina_mgpt.py": "import torch\n",
        "scheduler/logit_processor_3dim.py": "from transformers.generation.logits_process import "
                                             "LogitsWarper\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    _, solver, jacobi = module.import_reference(tmp_path)

    assert solver.LogitsWarper.__name__ == "LogitsWarper" and not hasattr(hf_logits_process, "LogitsWarper")
    assert sys.modules[hf_logits_process.__name__] is hf_logits_process
    cache = solver.transformers.DynamicCache()
    assert cache.key_cache == [] and cache.get_seq_length() == 0 and len(cache) == 0
    cache.key_cache.append(torch.zeros(1, 2, 5, 4))
    assert cache.get_seq_length() == 5 and len(cache) == 1
    assert not hasattr(transformers.DynamicCache(), "key_cache")
    assert solver.transformers.GenerationConfig is transformers.GenerationConfig
    event = jacobi.torch.cuda.Event(enable_timing=True)
    event.record()
    jacobi.torch.cuda.synchronize()
    assert jacobi.torch.cat is torch.cat and jacobi.torch.cuda.is_available is torch.cuda.is_available
    assert torch.cuda.Event is not type(event) and jacobi.torch is not torch
