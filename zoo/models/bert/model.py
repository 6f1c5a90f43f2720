"""Encoder-only Transformer: BERT (Devlin et al. 2019) and its heads.

Shape letters: B batch, T length, P masked positions, d width, V vocabulary.
"""

import keras

from zoo.layers import EncoderBlock, L2Normalize, LayerNormalization, MaskedLMTransform, MeanPooling, OutputBias, TokenAndPositionEmbedding
from zoo.layers.initializers import fresh
from zoo.models.base import ZooModel, check_index_range
from zoo.models.bert.config import BertConfig


def bert_initializer(stddev=0.02):
    return keras.initializers.TruncatedNormal(stddev=stddev)


def _bert_inputs():
    return {
        "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
        "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
        "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
    }


@keras.saving.register_keras_serializable(package="zoo")
class BertBackbone(ZooModel):
    """Token + segment + learned position embeddings, LayerNorm, N post-LN
    encoder blocks (no causal mask), and a tanh pooler on [CLS] (position 0).

    Args:
        config: a `BertConfig`, or its fields as keyword (or positional)
            arguments: `BertBackbone(vocabulary_size=..., num_layers=...)`.

    Inputs: `token_ids`, `segment_ids`, `padding_mask`, each (B, T) int32.
    Outputs: {"sequence_output": (B, T, d), "pooled_output": (B, d)}.

    Example:

    ```python
    backbone = BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=16)
    inputs = {
        "token_ids": np.array([[2, 7, 8, 3, 0]]),
        "segment_ids": np.zeros((1, 5), "int32"),
        "padding_mask": np.array([[1, 1, 1, 1, 0]]),
    }
    outputs = backbone(inputs)
    outputs["sequence_output"].shape  # (1, 5, 16)
    backbone.attention_scores(inputs)["self"].shape  # (2, 1, 2, 5, 5): (N, B, h, T, T)
    ```

    References:
        Devlin et al. 2019 (BERT), section 3 and Figure 2 (input
        representation), section 3.1 (the [CLS] pooler of the released
        code).
    """
    config_class = BertConfig

    def __init__(self, *args, dtype=None, **kwargs):
        config, kwargs = BertConfig.take(args, kwargs)
        init = bert_initializer(config.initializer_range)
        # === Layers ===
        self.embedding = TokenAndPositionEmbedding(
            config.vocabulary_size,
            config.max_sequence_length,
            config.hidden_dim,
            position="learned",
            embeddings_initializer=init,
            position_initializer=init,
            dtype=dtype,
            name="embedding",
        )
        self.segment_embedding = keras.layers.Embedding(
            config.num_segments, config.hidden_dim, embeddings_initializer=fresh(init), dtype=dtype,
            name="segment_embedding",
        )
        self.embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        self.embeddings_norm = LayerNormalization(
            epsilon=config.layer_norm_epsilon, dtype=dtype, name="embeddings_norm"
        )
        self.embeddings_dropout = keras.layers.Dropout(config.dropout, dtype=dtype, name="embeddings_dropout")
        self.blocks = [
            EncoderBlock(
                config.num_heads,
                config.intermediate_dim,
                dropout=config.dropout,
                activation=config.activation,
                norm_first=False,
                norm_epsilon=config.layer_norm_epsilon,
                kernel_initializer=init,
                dtype=dtype,
                name=f"block_{i}",
            )
            for i in range(config.num_layers)
        ]
        self.pooler = keras.layers.Dense(
            config.hidden_dim, activation="tanh", kernel_initializer=fresh(init), dtype=dtype, name="pooler"
        )

        # === Functional model ===
        inputs = _bert_inputs()
        x = self.embed(inputs["token_ids"], inputs["segment_ids"])
        for block in self.blocks:
            x = block(x, padding_mask=inputs["padding_mask"])
        pooled = self.pooler(x[:, 0, :])  # [CLS]
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": x, "pooled_output": pooled},
            dtype=dtype,
            **kwargs,
        )

        # === Config ===
        self._set_config(config)

    def embed(self, token_ids, segment_ids, training=None):
        """(B, T) token and segment ids -> (B, T, d): token + position +
        segment embeddings, LayerNorm, dropout."""
        x = self.embeddings_add([self.embedding(token_ids), self.segment_embedding(segment_ids)])
        return self.embeddings_dropout(self.embeddings_norm(x), training=training)

    def attention_scores(self, inputs):
        """The self-attention weights of every block and head for `inputs`
        (the model's input dict), computed by the blocks' own layers in
        inference mode: {"self": (N, B, h, T, T)}."""
        x, scores = self.embed(inputs["token_ids"], inputs["segment_ids"], training=False), []
        for block in self.blocks:
            x, block_scores = block.call(x, padding_mask=inputs["padding_mask"], return_attention_scores=True, training=False)
            scores.append(block_scores)
        return {"self": keras.ops.stack(scores)}

    def _check_values(self, inputs):
        check_index_range(inputs, "segment_ids", self._zoo_config["num_segments"], "segment id")


@keras.saving.register_keras_serializable(package="zoo")
class BertMaskedLM(ZooModel):
    """Masked-LM pretraining: logits (B, P, V) at `mask_positions` only,
    through a head tied to the token embedding.

    Args:
        backbone: a `BertBackbone`.

    Inputs: the backbone's inputs plus `mask_positions` (B, P) int32.
    Train with `y = mask_ids` (B, P) and `sample_weight = mask_weights`.

    Example:

    ```python
    masked_lm = BertMaskedLM(BertBackbone(30, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=16))
    batch = {  # two sentences, a [MASK] (id 4) in each
        "token_ids": np.array([[2, 7, 4, 3], [2, 4, 3, 0]]),
        "segment_ids": np.zeros((2, 4), "int32"),
        "padding_mask": np.array([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "mask_positions": np.array([[2], [1]]),
    }
    masked_lm(batch).shape  # (2, 1, 30): (B, P, V)
    ```

    References:
        Devlin et al. 2019 (BERT), section 3.1 ("Task #1: Masked LM") and
        appendix A.1.
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        config = backbone._zoo_config
        self.transform = MaskedLMTransform(
            config["activation"],
            config["layer_norm_epsilon"],
            config["initializer_range"],
            dtype=backbone.dtype_policy,
            name="masked_lm_transform",
        )
        self.output_bias = OutputBias(dtype=backbone.dtype_policy, name="masked_lm_bias")
        self.logits_cast = keras.layers.Activation("linear", dtype="float32", name="logits")
        # === Functional model ===
        inputs = _bert_inputs()
        inputs["mask_positions"] = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        outputs = backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
        h = self.transform(outputs["sequence_output"], inputs["mask_positions"])
        logits = self.output_bias(backbone.embedding(h, reverse=True))
        super().__init__(inputs=inputs, outputs=self.logits_cast(logits), **kwargs)
        # === Config ===
        self._record_config(backbone=backbone)

    def _check_values(self, inputs):
        if "token_ids" in inputs and "mask_positions" in inputs:
            length = keras.ops.shape(inputs["token_ids"])[-1]
            if isinstance(length, int):
                check_index_range(inputs, "mask_positions", length, "position")


@keras.saving.register_keras_serializable(package="zoo")
class BertClassifier(ZooModel):
    """[CLS] classification: pooled output -> dropout -> Dense(num_classes).

    Args:
        backbone: a `BertBackbone`.
        num_classes: at least 2.
        dropout: before the final layer.
        label_names: the classes' names in class order (a list of
            `num_classes` str), saved with the model, as transformers'
            `id2label`; None: the classes are their indices.

    Inputs: the backbone's. Outputs float32 logits (B, num_classes).

    Example:

    ```python
    backbone = BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=16)
    classifier = BertClassifier(backbone, num_classes=3)
    pair = {  # [CLS] a [SEP] b b [SEP]: the second sentence in segment 1
        "token_ids": np.array([[2, 7, 3, 8, 9, 3]]),
        "segment_ids": np.array([[0, 0, 0, 1, 1, 1]]),
        "padding_mask": np.ones((1, 6), "int32"),
    }
    classifier(pair).shape  # (1, 3)
    ```

    References:
        Devlin et al. 2019 (BERT), section 4.1 (GLUE: a classification
        layer on the final hidden state of [CLS]).
    """

    def __init__(self, backbone, num_classes=2, dropout=0.1, label_names=None, **kwargs):
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(
                f"`num_classes` must be an integer >= 2 (use 2 for binary "
                f"classification); got {num_classes!r}."
            )
        if label_names is not None:
            label_names = list(label_names)
            if len(label_names) != num_classes or not all(isinstance(n, str) for n in label_names):
                raise ValueError(
                    f"`label_names` must be {num_classes} strings, one per class; got {label_names!r:.200}."
                )
            if len(set(label_names)) != num_classes:
                raise ValueError(f"`label_names` must be distinct; got {label_names!r:.200}.")
        # === Layers ===
        self.backbone = backbone
        self.dropout_layer = keras.layers.Dropout(dropout, name="classifier_dropout")
        self.classifier = keras.layers.Dense(
            num_classes, kernel_initializer=bert_initializer(), dtype="float32", name="classifier"
        )
        # === Functional model ===
        inputs = _bert_inputs()
        pooled = backbone(inputs)["pooled_output"]
        logits = self.classifier(self.dropout_layer(pooled))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # === Config ===
        self.num_classes, self.label_names = num_classes, label_names
        self._record_config(backbone=backbone, num_classes=num_classes, dropout=dropout, label_names=label_names)


@keras.saving.register_keras_serializable(package="zoo")
class BertSentenceEncoder(ZooModel):
    """Sentence embeddings for semantic search: (B, d) vectors.

    Args:
        backbone: a `BertBackbone`.
        pooling: "cls" (the [CLS] hidden state) or "mean" (mean over
            non-padded tokens, as Sentence-BERT).
        normalize: return unit vectors (cosine similarity = dot product).

    Inputs: the backbone's. Outputs (B, d) float vectors.

    Example:

    ```python
    backbone = BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=16)
    token_ids = np.array([[2, 7, 8, 3, 0]])  # [CLS] w w [SEP] [PAD]
    inputs = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": token_ids != 0}
    encoder = BertSentenceEncoder(backbone, pooling="mean")
    vectors = encoder(inputs)  # (1, 16), unit length
    ```

    References:
        Reimers and Gurevych 2019 (Sentence-BERT), section 3 (pooling);
        Devlin et al. 2019 (BERT).
    """

    def __init__(self, backbone, pooling="mean", normalize=True, **kwargs):
        if pooling not in ("cls", "mean"):
            raise ValueError(f'`pooling` must be "cls" or "mean"; got {pooling!r}.')
        # === Layers ===
        self.backbone = backbone
        self.pooling = MeanPooling(name="mean_pooling") if pooling == "mean" else None
        self.normalize = L2Normalize(name="l2_normalize") if normalize else None
        # === Functional model ===
        inputs = _bert_inputs()
        sequence = backbone(inputs)["sequence_output"]
        if pooling == "mean":
            vectors = self.pooling(sequence, inputs["padding_mask"])
        else:
            vectors = sequence[:, 0, :]
        if normalize:
            vectors = self.normalize(vectors)
        super().__init__(inputs=inputs, outputs=vectors, **kwargs)
        # === Config ===
        self._record_config(backbone=backbone, pooling=pooling, normalize=normalize)
