// zoo explore: the page over one model. Plain JavaScript, no build step and no network
// beyond this page's own server.
"use strict";

const $ = (id) => document.getElementById(id);

// --- Colour scale: viridis, from 0 to the largest weight shown ------------------------

const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

function colour(t) {
  t = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(t), VIRIDIS.length - 2);
  const f = t - i;
  return VIRIDIS[i].map((c, k) => Math.round(c + f * (VIRIDIS[i + 1][k] - c)));
}

const css = (rgb) => `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
const inkOn = (t) => (t > 0.55 ? "#111" : "#fff");

// How a token reads on the page: whitespace made visible.
function shown(text) {
  return text.replace(/\n/g, "↵").replace(/\t/g, "⇥").replace(/^ $/, "␣");
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error?.message || `${path}: status ${response.status}`);
  return data;
}

function setStatus(id, text, error = false) {
  $(id).textContent = text;
  $(id).classList.toggle("error", error);
}

const number = (id) => Number($(id).value);

// --- Heatmap grid: one cell per layer and head, one colour scale --------------------

// tensor: [layer][head][row][column] weights. options: rowLabels, columnLabels, target (the element),
// note (what a row and a column are). A click on a cell enlarges that head below the grid.
function attentionGrid(tensor, options) {
  const target = options.target;
  target.replaceChildren();
  const layers = tensor.length, heads = tensor[0].length;
  const rows = tensor[0][0].length, columns = tensor[0][0][0].length;
  let top = 0;
  for (const layer of tensor) for (const head of layer) for (const row of head) for (const v of row) top = Math.max(top, v);
  top = top || 1;

  const grid = el("div", {class: "grid", id: options.target.id + "-grid"});
  grid.style.gridTemplateColumns = `auto repeat(${heads}, minmax(60px, 170px))`;
  grid.append(el("div"));
  for (let h = 0; h < heads; h++) grid.append(el("div", {class: "head-label", text: `head ${h + 1}`}));
  const enlarged = el("div", {class: "enlarged", id: options.target.id + "-enlarged"});
  const cells = [];
  for (let l = 0; l < layers; l++) {
    grid.append(el("div", {class: "layer-label", text: `layer ${l + 1}`}));
    for (let h = 0; h < heads; h++) {
      const canvas = el("canvas", {class: "cell", "data-layer": l, "data-head": h,
        title: `layer ${l + 1}, head ${h + 1}: click to enlarge`});
      canvas.width = columns;
      canvas.height = rows;
      canvas.style.aspectRatio = rows === 1 ? "170 / 22" : `${columns} / ${rows}`;
      const context = canvas.getContext("2d");
      const image = context.createImageData(columns, rows);
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < columns; c++) {
          const rgb = colour(tensor[l][h][r][c] / top);
          image.data.set([rgb[0], rgb[1], rgb[2], 255], 4 * (r * columns + c));
        }
      }
      context.putImageData(image, 0, 0);
      canvas.addEventListener("click", () => {
        cells.forEach((cell) => cell.classList.remove("chosen"));
        canvas.classList.add("chosen");
        enlarge(enlarged, tensor[l][h], l, h, top, options);
      });
      cells.push(canvas);
      grid.append(canvas);
    }
  }
  enlarged.append(el("p", {class: "axis-note", text: "Click a head to enlarge it."}));
  target.append(el("p", {class: "axis-note", text: options.note}), grid, legend(top), enlarged);
}

function legend(top) {
  const canvas = el("canvas");
  canvas.width = 200;
  canvas.height = 12;
  const context = canvas.getContext("2d");
  for (let x = 0; x < canvas.width; x++) {
    context.fillStyle = css(colour(x / (canvas.width - 1)));
    context.fillRect(x, 0, 1, canvas.height);
  }
  return el("div", {class: "legend", id: "legend"},
    el("span", {text: "0"}), canvas, el("span", {text: top.toFixed(3)}),
    el("span", {text: "attention weight (one scale for every layer and head)"}));
}

function enlarge(target, matrix, layer, head, top, options) {
  target.replaceChildren(el("h3", {text: `layer ${layer + 1}, head ${head + 1}`}));
  if (matrix.length === 1) {
    // One row (a token's attention over the context): the tokens, shaded by weight.
    const weights = el("div", {class: "weights"});
    matrix[0].forEach((w, c) => {
      const t = w / top;
      const span = el("span", {text: shown(options.columnLabels[c]), title: `${w.toFixed(4)}`});
      span.style.background = css(colour(t));
      span.style.color = inkOn(t);
      weights.append(span);
    });
    target.append(weights, el("p", {class: "axis-note", text: "Hover a token for its weight."}));
    return;
  }
  const table = el("table", {class: "matrix"});
  const header = el("tr", {}, el("th"));
  for (const label of options.columnLabels) header.append(el("th", {class: "column", text: shown(label)}));
  table.append(header);
  matrix.forEach((row, r) => {
    const line = el("tr", {}, el("th", {class: "row", text: shown(options.rowLabels[r])}));
    row.forEach((w, c) => {
      const cell = el("td", {title: `${shown(options.rowLabels[r])} → ${shown(options.columnLabels[c])}: ${w.toFixed(4)}`});
      cell.style.background = css(colour(w / top));
      line.append(cell);
    });
    table.append(line);
  });
  target.append(table);
}

function bars(table, rows) {
  // rows: [{label, value, actual, note}]
  table.replaceChildren();
  table.className = "bars";
  const top = Math.max(...rows.map((row) => row.value), 1e-9);
  rows.forEach((row, i) => {
    const bar = el("div", {class: "bar"});
    bar.style.width = `${(100 * row.value) / top}%`;
    table.append(el("tr", {class: row.actual ? "actual" : ""},
      el("td", {class: "rank", text: `${i + 1}`}),
      el("td", {}, el("span", {class: "chip", text: shown(row.label)})),
      el("td", {class: "barcell"}, bar),
      el("td", {class: "value", text: `${(100 * row.value).toFixed(1)}%`}),
      el("td", {class: "note", text: row.note || ""})));
  });
}

// --- Language model -------------------------------------------------------------------

const sequence = {ids: [], texts: [], controller: null};

function addToken(token, kind) {
  const index = sequence.ids.length;
  sequence.ids.push(token.id);
  sequence.texts.push(token.text);
  const span = el("span", {class: `token ${kind}`, "data-index": index,
    title: token.probability === undefined ? "prompt" : `p = ${token.probability.toFixed(3)}`});
  span.dataset.text = token.text;
  span.textContent = token.text.replace(/\n/g, "↵\n");  // a newline stays a line break, and can be clicked
  span.addEventListener("click", () => inspect(index));
  $("tokens").append(span);
}

async function generate(event) {
  event.preventDefault();
  if (sequence.controller) sequence.controller.abort();
  const controller = new AbortController();
  sequence.controller = controller;
  sequence.ids = [];
  sequence.texts = [];
  $("tokens").replaceChildren();
  $("inspect").hidden = true;
  const body = {prompt: $("prompt").value, sampler: $("sampler").value, max_new_tokens: number("length"),
    temperature: number("temperature"), top_k: number("top-k"), top_p: number("top-p"), seed: number("seed")};
  $("generate").disabled = true;
  $("stop").disabled = false;
  setStatus("generate-status", "generating…");
  let count = 0;
  try {
    const response = await fetch("/api/generate", {method: "POST", signal: controller.signal,
      headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
    if (!response.ok) throw new Error((await response.json()).error?.message || `/api/generate: status ${response.status}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const name = frame.match(/^event: (.*)$/m)[1];
        const data = JSON.parse(frame.match(/^data: (.*)$/m)[1]);
        if (name === "prompt") data.tokens.forEach((token) => addToken(token, "prompt"));
        else if (name === "token") { addToken(data, "generated"); count++; setStatus("generate-status", `${count} tokens…`); }
        else if (name === "error") throw new Error(data.error);
        else if (name === "done") setStatus("generate-status", `${count} new tokens. Click any token.`);
      }
    }
  } catch (error) {
    if (error.name === "AbortError") setStatus("generate-status", `stopped after ${count} tokens. Click any token.`);
    else setStatus("generate-status", error.message, true);
  } finally {
    if (sequence.controller === controller) sequence.controller = null;
    $("generate").disabled = false;
    $("stop").disabled = true;
  }
}

async function inspect(index) {
  document.querySelectorAll(".token.selected").forEach((span) => span.classList.remove("selected"));
  document.querySelector(`.token[data-index="${index}"]`).classList.add("selected");
  try {
    const answer = await post("/api/inspect", {ids: sequence.ids.slice(), position: index});
    const here = shown(sequence.texts[index]);
    $("inspect").hidden = false;
    $("probabilities-title").textContent = `After “${here}” (position ${index}), the model predicts`;
    bars($("probabilities"), answer.top.map((t) => ({label: t.text, value: t.probability, actual: t.id === answer.next,
      note: t.id === answer.next ? "came next" : ""})));
    $("attention-title").textContent = `Attention of “${here}” over its context (${answer.tokens.length} tokens)`;
    const labels = answer.tokens.map((t) => t.text);
    attentionGrid(answer.attention.map((layer) => layer.map((head) => [head])), {
      target: $("lm-attention"), rowLabels: [here], columnLabels: labels,
      note: "Each strip: the weights of this token's query over the context tokens, left (first) to right (itself).",
    });
  } catch (error) {
    setStatus("generate-status", error.message, true);
  }
}

// --- Translator -------------------------------------------------------------------------

async function translate(event) {
  event.preventDefault();
  setStatus("translate-status", "translating…");
  try {
    const answer = await post("/api/translate", {source: $("source").value, num_beams: number("beams"),
      length_penalty: number("length-penalty")});
    $("translation").textContent = answer.translation || "(empty)";
    setStatus("translate-status", `${answer.target_tokens.length} target tokens; click a head to enlarge it.`);
    attentionGrid(answer.cross, {
      target: $("cross-attention"), rowLabels: answer.target_tokens.map((t) => t.text),
      columnLabels: answer.source_tokens.map((t) => t.text),
      note: "Rows: the token each decoder step produced; columns: the source tokens.",
    });
  } catch (error) {
    setStatus("translate-status", error.message, true);
  }
}

// --- Classifier -------------------------------------------------------------------------

async function classify(event) {
  event.preventDefault();
  setStatus("classify-status", "classifying…");
  try {
    const answer = await post("/api/classify", {text: $("text").value});
    setStatus("classify-status", `label: ${answer.label}`);
    bars($("label-probabilities"), answer.labels.map((label, i) => ({label, value: answer.probabilities[i],
      actual: String(label) === String(answer.label)})));
    attentionGrid(answer.attention.map((layer) => layer.map((head) => [head])), {
      target: $("cls-attention"), rowLabels: ["[CLS]"], columnLabels: answer.tokens.map((t) => t.text),
      note: "Each strip: the [CLS] position's weights over the tokens, [CLS] first, [SEP] last.",
    });
  } catch (error) {
    setStatus("classify-status", error.message, true);
  }
}

// --- Start --------------------------------------------------------------------------------

function showCard(card) {
  const rows = [
    ["family", card.family + (card.task ? ` (${card.task})` : "")],
    ["preset", card.preset],
    ["parameters", card.parameters.toLocaleString("en")],
    ["size", `${card.num_layers} layers, ${card.num_heads} heads, width ${card.hidden_dim}, context ${card.context}`],
    ["tokenizer", card.tokenizer],
    ["recipe", card.recipe],
    ...Object.entries(card.results).map(([name, value]) => [name, Number(value).toFixed(4)]),
  ];
  for (const [name, value] of rows) {
    if (value === null || value === undefined) continue;
    const term = document.createElement("dt"), description = document.createElement("dd");
    term.textContent = name;
    description.textContent = value;
    $("card").append(term, description);
  }
}

async function start() {
  const info = await (await fetch("/api/info")).json();
  $("model-line").textContent = `${info.model} (${info.kind.replace("_", " ")}) · ${info.num_layers} layers · ` +
    `${info.num_heads} heads · context ${info.context} · vocabulary ${info.vocabulary_size} · ${info.name}`;
  showCard(info.card);
  document.body.dataset.kind = info.kind;
  $(info.kind.replace("_", "-")).hidden = false;
  if (info.kind === "language_model") {
    $("length").max = info.max_new_tokens;
    $("top-k").max = info.vocabulary_size;
    $("generate-form").addEventListener("submit", generate);
    $("stop").addEventListener("click", () => sequence.controller && sequence.controller.abort());
  } else if (info.kind === "translator") {
    $("translate-form").addEventListener("submit", translate);
  } else {
    $("classify-form").addEventListener("submit", classify);
  }
}

start();
