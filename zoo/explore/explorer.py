"""What `zoo explore` computes: a model opened once, and its answers to the
page's requests (generated tokens, attention, next-token probabilities,
translations, label probabilities): each method takes its request as
declared in `zoo.explore.protocol`, whose bounds it needs not check again,
checks what depends on the model, and returns its answer's model.

The zoo's API here, as in a user's own script: `zoo.load`,
`zoo.from_pretrained`, `zoo.text.TextGeneration` (the decoding that
`zoo.generate`, `zoo.stream` and `zoo serve` run), `zoo.generate`,
`zoo.classify`, the models' `attention_scores`, and their tokenizers.

Shape letters: N blocks, h heads, W context window, S source, T target,
V vocabulary.
"""

import threading
from pathlib import Path

import numpy as np

from zoo.explore import protocol
from zoo.explore.protocol import DEFAULT_TOP_K, MAX_NEW_TOKENS, Candidate, Token
from zoo.serve.web import RequestError, short
# open_target: the page's model, opened as `zoo serve` opens it.
from zoo.targets import RUN, open_target, read_run  # noqa: F401

# What the page shows, by model kind.
LANGUAGE_MODEL, TRANSLATOR, CLASSIFIER = "language_model", "translator", "classifier"
TOP = 10


def run_record(target):
    """The run.json of a run folder (recipe, preset, final figures), or None
    for a `.keras` file or a checkpoint folder."""
    path = Path(target)
    return read_run(path) if path.is_dir() and (path / RUN).is_file() else None


def kind_of(model):
    """LANGUAGE_MODEL, TRANSLATOR or CLASSIFIER; a ValueError for a model
    the page cannot show."""
    from zoo.models import BertClassifier, CausalLM, EncoderDecoder

    for cls, kind in ((CausalLM, LANGUAGE_MODEL), (EncoderDecoder, TRANSLATOR), (BertClassifier, CLASSIFIER)):
        if isinstance(model, cls):
            if tokenizer_of(model) is None:
                raise ValueError(
                    f"the {type(model).__name__} carries no tokenizer; `zoo explore` works on text, so it needs "
                    "a model saved with its tokenizer (model.tokenizer), as the recipes save them"
                )
            return kind
    raise ValueError(
        f"`zoo explore` shows a causal LM, an EncoderDecoder or a BertClassifier; got a {type(model).__name__}"
    )


def tokenizer_of(model):
    for owner in (model, getattr(model, "backbone", None)):
        tokenizer = getattr(owner, "tokenizer", None)
        if tokenizer is not None:
            return tokenizer
    return None


class Explorer:
    """One model and what the page asks of it. Model calls hold a lock:
    the server answers requests on several threads.

    Args:
        model: a `CausalLM`, `EncoderDecoder` or `BertClassifier` that
            carries its tokenizer.
        name: what the page calls it (the target's path).
        labels: the class names of a classifier, in class order; by default
            those saved with the model.
        run: the run.json record of a run folder (`run_record`), for the
            model card.
    """

    def __init__(self, model, name="", labels=None, run=None):
        self.model = model
        self.run = run
        self.kind = kind_of(model)
        self.name = str(name)
        self.tokenizer = tokenizer_of(model)
        self.lock = threading.Lock()
        if self.kind == CLASSIFIER:
            count = model.num_classes
            if labels is not None and len(labels) != count:
                raise ValueError(f"--labels names {len(labels)} classes but the model has {count}")
            saved = getattr(model, "label_names", None)  # the names a run saved with its model
            self.labels = list(labels or saved or [str(i) for i in range(count)])
        else:
            self.labels = None

    # --- What every page asks first ----------------------------------------------

    def info(self):
        """The model's kind and sizes, and its card."""
        backbone = getattr(self.model, "backbone", self.model)
        return protocol.Info(
            card=self.card(),
            kind=self.kind,
            name=self.name,
            model=type(self.model).__name__,
            num_layers=int(backbone.num_layers),
            num_heads=int(backbone.num_heads),
            context=int(self.context),
            vocabulary_size=int(self.tokenizer.vocabulary_size()),
            labels=self.labels,
            max_new_tokens=MAX_NEW_TOKENS,
        )

    def card(self):
        """The model card: family, preset, parameters, sizes, tokenizer and,
        for a run folder, its recipe and final figures."""
        from zoo.families import of_model
        from zoo.models import BertClassifier

        backbone = getattr(self.model, "backbone", self.model)
        family = of_model(self.model).name
        run = self.run or {}
        results = run.get("results") or {}
        return protocol.Card(
            family=family,
            task="classifier" if isinstance(self.model, BertClassifier) else None,
            preset=run.get("preset"),
            parameters=int(self.model.count_params()),
            num_layers=int(backbone.num_layers),
            num_heads=int(backbone.num_heads),
            hidden_dim=int(backbone.hidden_dim),
            context=int(self.context),
            tokenizer=f"{type(self.tokenizer).__name__}, {int(self.tokenizer.vocabulary_size())} tokens",
            recipe=run.get("recipe"),
            results={key: value for key, value in results.items()
                     if isinstance(value, (int, float)) and not isinstance(value, bool)},
        )

    @property
    def context(self):
        return getattr(self.model, "max_sequence_length", None) or self.model.backbone.max_sequence_length

    # --- Language model -----------------------------------------------------------

    def check_generate(self, request):
        """The prompt's token ids of a `GenerateRequest`, once what depends
        on the model is checked (its kind, its tokenizer, its vocabulary)."""
        self._expect(LANGUAGE_MODEL, "/api/generate")
        vocabulary = int(self.model.vocabulary_size)
        if request.top_k is not None and request.top_k > vocabulary:
            raise RequestError(f"top_k: expected an integer in [1, {vocabulary}]; got {request.top_k}", "top_k")
        ids = self.encode(request.prompt, field="prompt")
        if not ids:
            raise RequestError(f"prompt: {short(request.prompt)} has no tokens; expected text the tokenizer knows",
                               "prompt")
        return ids

    def stream(self, request, ids):
        """Yields each new token of a `GenerateRequest` whose prompt is
        `ids` (`check_generate`) as it is chosen, a `TokenEvent`. The
        decoding is `zoo.text.TextGeneration`'s, what `zoo.generate`,
        `zoo.stream` and `zoo serve` run (the same tokens for the same
        settings and seed; past the context window, nanoGPT's sliding
        window; the tokenizer's end token stops it); `probability` is the
        model's softmax probability of the token."""
        from zoo.text import TextGeneration

        prompt = list(ids)
        top_k = min(DEFAULT_TOP_K, int(self.model.vocabulary_size)) if request.top_k is None else request.top_k
        with self.lock:
            generation = TextGeneration(
                self.model, [prompt], request.max_new_tokens, sampler=request.sampler, seed=request.seed,
                temperature=request.temperature, top_k=top_k, top_p=request.top_p,
            )
        steps, shown = generation.steps(every_token=True), 0
        while True:
            with self.lock:
                gained = next(steps, None)
            decoding = generation.decoding
            for token, probability in list(zip(decoding.new_tokens[0], decoding.probabilities[0]))[shown:]:
                shown += 1
                yield protocol.TokenEvent(index=len(prompt) + shown - 1, id=int(token), text=self.token_text(token),
                                          probability=float(probability))
            if gained is None:
                return

    def inspect(self, request):
        """The attention of the token at `position` over its context, for
        every block and head, and the top-10 next-token probabilities
        there.

        Args:
            request: an `InspectRequest`: the sequence's token `ids` and a
                `position` among them.

        Returns:
            An `InspectResponse`: `position`, `start` (the window's first
            index), `tokens` (the window's), `attention` (N, h, W), `top`
            best first, `next` (the id that came after `position`, or None).
        """
        self._expect(LANGUAGE_MODEL, "/api/inspect")
        ids, position = request.ids, request.position
        vocabulary = int(self.model.vocabulary_size)
        outside = next((i for i, t in enumerate(ids) if t >= vocabulary), None)
        if outside is not None:
            raise RequestError(f"ids[{outside}]: expected a token id in [0, {vocabulary}); got {ids[outside]}", "ids")
        if position >= len(ids):
            raise RequestError(f"position: expected an integer in [0, {len(ids) - 1}], the index of a token in ids; "
                               f"got {position}", "position")
        start = max(0, position + 1 - self.context)
        window = ids[start : position + 1]
        inputs = {"token_ids": np.array([window], "int32"), "padding_mask": np.ones((1, len(window)), "int32")}
        with self.lock:
            scores = self.model.attention_scores(inputs)["self"]  # (N, 1, h, W, W)
            logits = self.model.predict_on_batch(inputs)  # (1, W, V)
        attention = np.asarray(scores, "float32")[:, 0, :, -1, :]  # (N, h, W): the position's row
        probabilities = _softmax(np.asarray(logits, "float32")[0, -1])
        best = np.argsort(-probabilities, kind="stable")[:TOP]
        return protocol.InspectResponse(
            position=position,
            start=start,
            tokens=self.tokens(window),
            attention=_rounded(attention),
            top=[Candidate(id=int(t), text=self.token_text(t), probability=float(probabilities[t])) for t in best],
            next=int(ids[position + 1]) if position + 1 < len(ids) else None,
        )

    # --- Translator ---------------------------------------------------------------

    def translate(self, request):
        """A translation and the decoder's cross-attention over the source.

        Args:
            request: a `TranslateRequest`: the `source` sentence,
                `num_beams` (1 is greedy) and `length_penalty`.

        Returns:
            A `TranslateResponse`: `translation`, `source_tokens` (S),
            `target_tokens` (T: the token each decoder position produced),
            `cross` (N, h, T, S).
        """
        import zoo

        self._expect(TRANSLATOR, "/api/translate")
        source, beams, penalty = request.source, request.num_beams, request.length_penalty
        context = self.context
        source_tokenizer = getattr(self.model, "source_tokenizer", None) or self.tokenizer
        source_ids = self.encode(source, source_tokenizer, "source")[:context]
        if not source_ids:
            raise RequestError(f"source: {short(source)} has no tokens; expected text the tokenizer knows", "source")
        start, end = self.special_id("[START]", "start_token_id"), self.special_id("[END]", "end_token_id")
        with self.lock:  # the call `zoo.translate` makes for one sentence
            result = zoo.generate(
                self.model,
                [[start]],
                min(len(source_ids) + 10, context - 1),
                sampler="beam" if beams > 1 else "greedy",
                stop_token_ids=[end],
                source=[source_ids],
                num_beams=beams,
                length_penalty=penalty,
            )
            produced = [int(t) for t in result.sequences[0]]
            decoder = [start] + produced[:-1]
            inputs = {
                "encoder_token_ids": np.array([source_ids], "int32"),
                "encoder_padding_mask": np.ones((1, len(source_ids)), "int32"),
                "decoder_token_ids": np.array([decoder], "int32"),
                "decoder_padding_mask": np.ones((1, len(decoder)), "int32"),
            }
            cross = np.asarray(self.model.attention_scores(inputs)["cross"], "float32")[:, 0]  # (N, h, T, S)
        words = produced[: produced.index(end)] if end in produced else produced
        return protocol.TranslateResponse(
            translation=self.decode(words),
            source_tokens=self.tokens(source_ids, source_tokenizer),
            target_tokens=self.tokens(produced),
            cross=_rounded(cross),
        )

    # --- Classifier ---------------------------------------------------------------

    def classify(self, request):
        """Label probabilities and the [CLS] row of attention.

        Args:
            request: a `ClassifyRequest`: the sentence, `text`.

        Returns:
            A `ClassifyResponse`: `labels`, `probabilities`, `label` (the
            most likely), `tokens` ([CLS] ... [SEP]), `attention` (N, h,
            T), the [CLS] position's attention over the tokens.
        """
        import zoo

        self._expect(CLASSIFIER, "/api/classify")
        text = request.text
        cls_id, sep_id = self.special_id("[CLS]", "cls_token_id"), self.special_id("[SEP]", "sep_token_id")
        context = self.context
        packed = ([cls_id] + self.encode(text)[: context - 2] + [sep_id])[:context]  # as zoo.classify packs
        inputs = {
            "token_ids": np.array([packed], "int32"),
            "segment_ids": np.zeros((1, len(packed)), "int32"),
            "padding_mask": np.ones((1, len(packed)), "int32"),
        }
        with self.lock:
            result = zoo.classify(self.model, [text], label_names=self.labels)
            scores = self.model.backbone.attention_scores(inputs)["self"]  # (N, 1, h, T, T)
        return protocol.ClassifyResponse(
            labels=self.labels,
            probabilities=[float(p) for p in result.probabilities[0]],
            label=result.labels[0],
            tokens=self.tokens(packed),
            attention=_rounded(np.asarray(scores, "float32")[:, 0, :, 0, :]),  # (N, h, T)
        )

    # --- Tokens -------------------------------------------------------------------

    def encode(self, text, tokenizer=None, field="text"):
        """The ids of `text` (of at most `protocol.MAX_CHARACTERS`, as its
        request declares); a tokenizer's refusal (a character it never saw)
        is the request's error, named by `field`."""
        from zoo.tokenizers import token_id_lists

        try:
            return token_id_lists(tokenizer or self.tokenizer, [text])[0]
        except ValueError as error:
            raise RequestError(f"{field}: {error}", field) from None

    def decode(self, ids, tokenizer=None):
        if not ids:
            return ""
        text = (tokenizer or self.tokenizer).detokenize([list(map(int, ids))])
        if not isinstance(text, (str, list, tuple)):
            import keras

            text = keras.ops.convert_to_numpy(text)
        text = text if isinstance(text, str) else text[0]
        if isinstance(text, np.ndarray):
            text = text.item()
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)

    def token_text(self, token, tokenizer=None):
        return self.decode([int(token)], tokenizer)

    def tokens(self, ids, tokenizer=None):
        """The `Token` (id, text) of each id."""
        return [Token(id=int(t), text=self.token_text(t, tokenizer)) for t in ids]

    def special_id(self, token, attribute):
        value = getattr(self.tokenizer, attribute, None)
        if value is not None:
            return int(value)
        vocabulary = self.tokenizer.get_vocabulary()
        if token in vocabulary:
            return vocabulary.index(token)
        raise RequestError(f"the model's tokenizer has no {token} token; expected one, as the recipes' tokenizers have")

    def _expect(self, kind, endpoint):
        if self.kind != kind:
            raise RequestError(
                f"{endpoint} needs a {kind.replace('_', ' ')}; this server explores a "
                f"{self.kind.replace('_', ' ')} ({type(self.model).__name__})"
            )


def _softmax(logits):
    z = np.asarray(logits, "float64")
    z = np.exp(z - z.max())
    return z / z.sum()


def _rounded(array):
    """Nested lists of 4-decimal floats: what the page draws, and a third
    of the JSON of full floats."""
    return np.round(np.asarray(array, "float64"), 4).tolist()
