// tinyglot web demo: embed sentences with MediaPipe's TextEmbedder and show their cosine similarities.
//   index.html?model=URL            the .tflite of a tflite-mediapipe bundle (default: the released
//                                   tinyglot-mini, when the repository root is served)
//   &sentences=JSON                 sentences to embed at start (default: the text box)
//   &report=URL                     POST {sentences, embeddings, matrix} (or {error}) there when done
import { FilesetResolver, TextEmbedder } from "./node_modules/@mediapipe/tasks-text/text_bundle.mjs";

const params = new URLSearchParams(location.search);
const modelUrl = params.get("model") || "../../tinyglot/released/tinyglot-mini/tflite-mediapipe/model.tflite";
const reportUrl = params.get("report");
const $ = (id) => document.getElementById(id);

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}

function render(sentences, matrix) {
  const table = $("matrix");
  table.replaceChildren();
  const head = table.insertRow();
  head.insertCell().outerHTML = "<th></th>";
  sentences.forEach((_, j) => { head.insertCell().outerHTML = `<th>#${j + 1}</th>`; });
  sentences.forEach((s, i) => {
    const row = table.insertRow();
    const th = document.createElement("th");
    th.textContent = `#${i + 1} ${s}`;
    th.title = s;
    row.appendChild(th);
    matrix[i].forEach((v) => {
      const cell = row.insertCell();
      cell.textContent = v.toFixed(3);
      cell.style.background = `rgba(40, 120, 220, ${Math.max(0, v).toFixed(2)})`;
    });
  });
}

async function report(body) {
  if (reportUrl) await fetch(reportUrl, { method: "POST", body: JSON.stringify(body) });
}

async function main() {
  $("model").textContent = modelUrl;
  const fileset = await FilesetResolver.forTextTasks(new URL("node_modules/@mediapipe/tasks-text/wasm", location.href).href);
  const embedder = await TextEmbedder.createFromOptions(fileset, { baseOptions: { modelAssetPath: modelUrl } });
  const embed = () => {
    const sentences = $("sentences").value.split("\n").map((s) => s.trim()).filter((s) => s);
    const embeddings = sentences.map((s) => {
      const heads = embedder.embed(s).embeddings;
      const head = heads.find((e) => e.headName === "sentence_embedding") || heads[0];
      return Array.from(head.floatEmbedding);
    });
    const matrix = embeddings.map((a) => embeddings.map((b) => cosine(a, b)));
    render(sentences, matrix);
    $("status").textContent = `${sentences.length} sentences, dimension ${embeddings[0]?.length ?? 0}`;
    return { sentences, embeddings, matrix };
  };
  if (params.get("sentences")) $("sentences").value = JSON.parse(params.get("sentences")).join("\n");
  $("embed").disabled = false;
  $("embed").onclick = embed;
  await report(embed());
}

main().catch(async (err) => {
  $("status").textContent = `error: ${err}`;
  await report({ error: String(err && err.stack || err) });
});
