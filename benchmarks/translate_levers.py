"""Which average of the weights translates best, epoch by epoch: one run of
`recipes.translate` that keeps several averages side by side.

    python benchmarks/translate_levers.py --epochs 12 --bleu-epochs 8,10,12

Trains the recipe's model with its own data, schedule and optimizer, but
with the optimizer's average turned off; a callback keeps, after every
step t (counted from 1), one average per rule:

- `raw`: the trained weights themselves;
- `ema-0.998`: a constant momentum of 0.998, the average Keras's
  `use_ema=True` keeps (its first step copies the weights);
- `warmup-2/3`, `warmup-3/4`: momentum min(0.998, 1 - t ** -p), the
  warm-up of timm's `ModelEmaV3` (gamma 1; 0 at the first step, which
  copies the weights): the window grows as t ** p instead of standing at
  500 steps from the start.

At every epoch end each average is swapped in and scored on the validation
split: loss (and, at --bleu-epochs, cased BLEU with the recipe's beam search
over all 1,014 sentences). Then, at the last epoch, the average with the best
BLEU is decoded with each --beams x --length-penalties pair, and each
average's model is saved as `OUTPUT/RULE.keras`. Everything is
validation: the test split is never read. Each line printed is one figure;
the table at the end repeats them. The same run's averages see the same
batches, so their differences are the averages' own.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

RULES = {
    "raw": None,
    "ema-0.998": lambda t: 0.998 if t > 1 else 0.0,
    "warmup-2/3": lambda t: min(0.998, 1.0 - t ** (-2.0 / 3.0)),
    "warmup-3/4": lambda t: min(0.998, 1.0 - t ** (-3.0 / 4.0)),
}


def averages_callback(model, rules):
    """A callback that updates one average of `model.trainable_variables`
    per rule after every training step; `.swapped(name)` is a context in
    which the model holds that average."""
    import contextlib

    import keras
    import tensorflow as tf

    weights = model.trainable_variables

    class Averages(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.step = 0
            self.averages = {name: [tf.Variable(w.value, trainable=False) for w in weights]
                             for name, rule in rules.items() if rule is not None}

        @tf.function
        def update(self, momenta):
            for index, average in enumerate(self.averages.values()):
                m = momenta[index]
                for a, w in zip(average, weights):
                    a.assign(m * a + (1.0 - m) * tf.cast(w.value, a.dtype))

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            momenta = tf.constant([rule(self.step) for rule in rules.values() if rule is not None], "float32")
            self.update(momenta)

        @contextlib.contextmanager
        def swapped(self, name):
            if name not in self.averages:
                yield
                return
            kept = [w.numpy() for w in weights]
            for w, a in zip(weights, self.averages[name]):
                w.assign(a)
            try:
                yield
            finally:
                for w, value in zip(weights, kept):
                    w.assign(value)

    return Averages()


def main(argv=None):
    import keras

    from recipes import translate as recipe
    from recipes.startup import start
    from zoo.data import read_parallel
    from zoo.training.bleu import translation_scores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--bleu-epochs", default="8,10,12", help="epochs whose end scores BLEU (comma-separated)")
    parser.add_argument("--rules", default=",".join(RULES), help=f"averages to keep, of {', '.join(RULES)}")
    parser.add_argument("--beams", default="1,4,6", help="beam sizes tried at the last epoch")
    parser.add_argument("--length-penalties", default="0.6,1.0", help="length penalties tried at the last epoch")
    parser.add_argument("--output", default="/tmp/translate_levers")
    parser.add_argument("--max-val-sentences", type=int, default=None)
    parser.add_argument("recipe_flags", nargs="*", help="after --: flags for the recipe (--subword bpe, ...)")
    options = parser.parse_args(argv)
    rules = {name: RULES[name] for name in options.rules.split(",")}
    bleu_epochs = {int(e) for e in options.bleu_epochs.split(",") if e}

    args = recipe.parse(["--output", options.output, "--overwrite", "--epochs", str(options.epochs),
                         "--ema-momentum", "0", *options.recipe_flags])
    start(args)
    data = recipe.read_data(args)
    recipe.open_folder(args, data)  # the run folder: tokenizer.json, run.json
    model = recipe.make_model(args, data)
    sources, references = read_parallel(args.data, "val", args.source_lang, args.target_lang)
    count = options.max_val_sentences or len(sources)
    averages = averages_callback(model, rules)
    rows, started = [], time.time()

    def bleu(beams, penalty):
        hypotheses = recipe.translate_text(model, sources[:count], dict(beam_size=beams, length_penalty=penalty))
        return translation_scores(hypotheses, references[:count])["bleu"]

    def score(epoch):
        trained = time.time() - started
        for name in rules:
            with averages.swapped(name):
                loss = model.evaluate(data["val"], steps=data["val_steps"], verbose=0, return_dict=True)["loss"]
                value = bleu(args.beam_size, args.length_penalty) if epoch in bleu_epochs else None
            rows.append((epoch, name, loss, value))
            shown = "" if value is None else f" val_bleu={value:.2f}"
            print(f"epoch {epoch} ({trained / 60:.1f} min trained) {name}: val_loss={loss:.4f}{shown}", flush=True)

    class Score(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            nonlocal started
            paused = time.time()
            score(epoch + 1)
            started += time.time() - paused  # scoring is not training time

    model.fit(data["train"].repeat(), steps_per_epoch=data["steps"], epochs=args.epochs,
              callbacks=[averages, Score()], shuffle=False, verbose=2)

    for name in rules:  # each average's model, to decode again later without training
        with averages.swapped(name):
            model.save(Path(options.output) / f"{name.replace('/', '_')}.keras")
    last = [row for row in rows if row[0] == args.epochs and row[3] is not None]
    print("\nepoch  average      val_loss  val_bleu")
    for epoch, name, loss, value in rows:
        print(f"{epoch:5d}  {name:11s}  {loss:8.4f}  {'' if value is None else f'{value:.2f}'}")
    if last:
        best = max(last, key=lambda row: row[3])[1]
        print(f"\nbeam search with the {best} average at epoch {args.epochs}:")
        with averages.swapped(best):
            for beams in (int(b) for b in options.beams.split(",")):
                for penalty in (float(p) for p in options.length_penalties.split(",")):
                    if (beams, penalty) == (args.beam_size, args.length_penalty):  # scored above
                        value = max(row[3] for row in last)
                    else:
                        value = bleu(beams, penalty)
                    print(f"beams {beams} length_penalty {penalty}: val_bleu={value:.2f}", flush=True)


if __name__ == "__main__":
    main()
