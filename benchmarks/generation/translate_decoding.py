"""Which beam search translates best: a translate run's saved model decoded
on the validation split with each beam size and length penalty.

    python benchmarks/generation/translate_decoding.py runs/translate --beams 1,4,6,8 --length-penalties 0.6,1.0

Reads `RUN/model.keras` (the model the recipe scored) and the run's own
data, and prints, per pair, the cased BLEU (sacrebleu's default, the
recipe's figure), the lowercased BLEU, chrF and the seconds the decoding
took, then the best pair by cased BLEU. Only the validation split is
read: the test split stays unseen, so a pair chosen here can become the
recipe's default without tuning on the figure reported for test.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import argparse  # noqa: E402
import time  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a translate run folder")
    parser.add_argument("--beams", default="4,6", help="beam sizes (comma-separated; 1 is greedy)")
    parser.add_argument("--length-penalties", default="0.6,1.0", help="length penalties (comma-separated)")
    options = parser.parse_args(argv)

    import zoo
    from zoo.data import read_parallel
    from zoo.tokenizers import HuggingFaceTokenizer
    from zoo.training.bleu import detokenize, translation_scores

    from recipes.run_folder import load_model, read_run

    args = read_run(options.run)["args"]
    sources, references = read_parallel(args["data"], "val", args["source_lang"], args["target_lang"])
    model = load_model(options.run)
    print(f"{options.run}: {len(sources):,} validation sentences; the run decoded with "
          f"{args['beam_size']} beams, length penalty {args['length_penalty']}", flush=True)
    print("| beams | length penalty | cased BLEU | lowercased | chrF | seconds |")
    print("|---|---|---|---|---|---|")
    rows = []
    for beams in (int(b) for b in options.beams.split(",")):
        for penalty in (float(p) for p in options.length_penalties.split(",")):
            if beams == 1 and rows and rows[-1][0] == 1:
                continue  # greedy decoding has no length penalty
            started = time.time()
            hypotheses = zoo.translate(model, sources, num_beams=beams, length_penalty=penalty)
            seconds = time.time() - started
            if not isinstance(model.tokenizer, HuggingFaceTokenizer):  # WordPiece: as the recipe scores it
                hypotheses = [detokenize(h) for h in hypotheses]
            scores = translation_scores(hypotheses, references)
            rows.append((beams, penalty, scores["bleu"]))
            print(f"| {beams} | {'-' if beams == 1 else penalty} | {scores['bleu']:.2f} | "
                  f"{scores['bleu_lowercase']:.2f} | {scores['chrf']:.2f} | {seconds:.0f} |", flush=True)
    beams, penalty, bleu = max(rows, key=lambda row: row[2])
    decoding = "greedy" if beams == 1 else f"{beams} beams, length penalty {penalty}"
    print(f"best: {decoding}: val_bleu={bleu:.2f}")


if __name__ == "__main__":
    main()
