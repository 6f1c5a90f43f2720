"""Writes the GGUF files that llama.cpp's own converter makes of two tiny
random checkpoints (tests/data/gguf/), which test_gguf.py loads in the zoo.

    python -m tests.checkpoints.llama_cpp_converted LLAMA_CPP

LLAMA_CPP is a llama.cpp source tree (the repository, or the
`vendor/llama.cpp` of llama-cpp-python's sdist: `pip download --no-deps
--no-binary :all: llama-cpp-python`); the converter needs torch and
transformers. The checkpoints are `llama_checkpoints.hf_folder(..., "llama",
seed=7, num_hidden_layers=1)` (Llama 3's rope scaling, grouped-query
attention) and `stand_ins.hf_gpt2_folder(..., seed=9, num_layers=1)`, rebuilt
the same at test time. Their tokenizers were trained here, so the
converter's table of known pre-tokenizers (a hash of the token ids of a
test text) does not name them: it is told "gpt-2", the pattern they split
with.
"""

import runpy
import sys
import tempfile
from pathlib import Path

from tests.checkpoints import llama_checkpoints as lc
from tests.checkpoints import stand_ins as ck

FOLDER = Path(__file__).parent.parent / "data" / "gguf"
LLAMA = dict(name="llama", seed=7, num_hidden_layers=1)
GPT2 = dict(seed=9, num_layers=1)


def hf_llama(folder):
    return lc.hf_folder(folder, LLAMA["name"], seed=LLAMA["seed"], num_hidden_layers=LLAMA["num_hidden_layers"])


def hf_gpt2(folder):
    return ck.hf_gpt2_folder(folder, **GPT2)


def convert(llama_cpp, folder, outfile):
    import subprocess

    script = (
        f"import sys, runpy; sys.path[:0] = [{str(llama_cpp)!r}, {str(llama_cpp / 'gguf-py')!r}]\n"
        "import conversion.base as base\n"
        "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'gpt-2'\n"
        f"sys.argv = ['convert_hf_to_gguf.py', {str(folder)!r}, '--outtype', 'f16', '--outfile', {str(outfile)!r}]\n"
        f"runpy.run_path({str(llama_cpp / 'convert_hf_to_gguf.py')!r}, run_name='__main__')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def main(llama_cpp):
    FOLDER.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        convert(Path(llama_cpp), hf_llama(Path(scratch) / "llama"), FOLDER / "llama_cpp_llama.gguf")
        convert(Path(llama_cpp), hf_gpt2(Path(scratch) / "gpt2"), FOLDER / "llama_cpp_gpt2.gguf")


if __name__ == "__main__":
    main(sys.argv[1])
