// @ts-check
// sessionkit viewer: a bundle's search (docs/viewer.md#search), the same as store.search's.
//
// A classic script, before viewer.js. A bundle opened from file:// has no store to ask, so the
// bundle carries an index written by sessionkit.widgets._bundle_search with the store's own
// tokenizer and stemmer, and this file answers a query as store.search does on SQLite:
//
// * the query is split into words and "quoted phrases" as sessionkit.store.search.parse_query
//   does, each word case-folded and stemmed with the Snowball English algorithm (skStem below,
//   the algorithm the store's stemmer runs), so "deployments" finds "deploying";
// * every word and phrase must occur; the matches are ranked with BM25 as SQLite's FTS5
//   bm25() computes it (k1 = 1.2, b = 0.75; IDF = ln((N - n + 0.5) / (n + 0.5)), at least
//   1e-6), N and the average length counted over every message of the bundle; the newest
//   `candidates` matches are ranked (store.settings.search_candidates when the bundle was written),
//   ties newest first;
// * each hit's snippet is sessionkit.store.search.snippet's: a window of 160 characters
//   around the first match, matched words marked [like this].
//
// Hand-written, stemmer included: a page opened from file:// can load no library, and the
// project ships no third-party JavaScript.

/* exported skStem, skParseQuery, skBundleSearch */

// -- the Snowball English stemmer (snowballstem.org's english.sbl, as the store's stemmer) -----

const SK_STEM_EXCEPTIONS = new Map([
  ["skis", "ski"], ["skies", "sky"], ["idly", "idl"], ["gently", "gentl"], ["ugly", "ugli"], ["early", "earli"],
  ["only", "onli"], ["singly", "singl"], ["sky", "sky"], ["news", "news"], ["howe", "howe"], ["atlas", "atlas"],
  ["cosmos", "cosmos"], ["bias", "bias"], ["andes", "andes"],
]);
const SK_STEM_PREFIXES = ["gener", "commun", "arsen", "past", "univers", "later", "emerg", "organ", "inter"];
const SK_STEP2 = [
  ["ization", "ize"], ["ational", "ate"], ["fulness", "ful"], ["ousness", "ous"], ["iveness", "ive"],
  ["tional", "tion"], ["biliti", "ble"], ["lessli", "less"], ["entli", "ent"], ["ation", "ate"], ["alism", "al"],
  ["aliti", "al"], ["ousli", "ous"], ["iviti", "ive"], ["fulli", "ful"], ["ogist", "og"], ["enci", "ence"],
  ["anci", "ance"], ["abli", "able"], ["izer", "ize"], ["ator", "ate"], ["alli", "al"], ["bli", "ble"],
  ["ogi", "og"], ["li", ""],
];
const SK_STEP3 = [["ational", "ate"], ["tional", "tion"], ["alize", "al"], ["icate", "ic"], ["iciti", "ic"], ["ative", ""], ["ical", "ic"], ["ness", ""], ["ful", ""]];
const SK_STEP4 = ["ement", "ance", "ence", "able", "ible", "ment", "ant", "ent", "ism", "ate", "iti", "ous", "ive", "ize", "ion", "al", "er", "ic"];

function skStem(word) {
  if (SK_STEM_EXCEPTIONS.has(word)) return SK_STEM_EXCEPTIONS.get(word);
  let w = Array.from(word); // code points, as the store's stemmer counts them
  if (w.length < 3) return word;
  const vowel = (ch) => ch === "a" || ch === "e" || ch === "i" || ch === "o" || ch === "u" || ch === "y";
  if (w[0] === "'") w.shift();
  if (w[0] === "y") w[0] = "Y";
  for (let i = 0; i + 1 < w.length; i++) if (vowel(w[i]) && w[i + 1] === "y") w[i + 1] = "Y";
  const str = () => w.join("");
  const ends = (s) => w.length >= s.length && w.slice(w.length - s.length).join("") === s;
  // the regions: R1 after the first non-vowel following a vowel (or a listed prefix), R2 the same after R1
  const pastVC = (from) => {
    let i = from;
    while (i < w.length && !vowel(w[i])) i++;
    if (i >= w.length) return -1;
    i++;
    while (i < w.length && vowel(w[i])) i++;
    return i >= w.length ? -1 : i + 1;
  };
  let p1 = w.length;
  let p2 = w.length;
  const head = str();
  const prefix = SK_STEM_PREFIXES.find((p) => head.startsWith(p));
  const r1 = prefix ? prefix.length : pastVC(0);
  if (r1 >= 0) {
    p1 = r1;
    const r2 = pastVC(r1);
    if (r2 >= 0) p2 = r2;
  }
  // a short syllable ending at `at` (exclusive)
  const shortv = (at) =>
    (at >= 3 && !vowel(w[at - 1]) && !"wxY".includes(w[at - 1]) && vowel(w[at - 2]) && !vowel(w[at - 3])) ||
    (at === 2 && !vowel(w[1]) && vowel(w[0])) ||
    (at >= 4 && w.slice(at - 4, at).join("") === "past");
  const hasVowel = (from, to) => w.slice(from, to).some(vowel);
  const replace = (n, by) => {
    w = w.slice(0, w.length - n).concat(Array.from(by));
  };

  // Step 1a
  if (ends("sses")) replace(4, "ss");
  else if (ends("ied") || ends("ies")) replace(3, w.length - 3 >= 2 ? "i" : "ie");
  else if (ends("us") || ends("ss")) {
    /* kept */
  } else if (ends("s") && hasVowel(0, w.length - 2)) replace(1, "");

  // Step 1b
  const n = w.length;
  let suffix = null;
  for (const s of ["eedly", "ingly", "edly", "eed", "ing", "ed"]) {
    if (ends(s)) {
      suffix = s;
      break;
    }
  }
  let regular = false;
  if (suffix === "eed" || suffix === "eedly") {
    const at = n - suffix.length;
    if (p1 <= at) {
      const before = w.slice(0, at).join("");
      if (!["proc", "exc", "succ"].includes(before)) replace(suffix.length, "ee");
    }
  } else if (suffix === "ing") {
    const at = n - 3;
    const before = w.slice(0, at).join("");
    if (at === 2 && w[1] === "y" && !vowel(w[0])) replace(4, "ie");
    else if (!["inn", "out", "cann", "herr", "earr", "even"].includes(before)) regular = true;
  } else if (suffix) regular = true;
  if (regular) {
    const at = n - suffix.length;
    if (hasVowel(0, at)) {
      replace(suffix.length, "");
      const m = w.length;
      const last2 = m >= 2 ? w[m - 2] + w[m - 1] : "";
      if (last2 === "at" || last2 === "bl" || last2 === "iz") w.push("e");
      else if (["bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt"].includes(last2)) {
        if (!(m === 3 && "aeo".includes(w[0]))) w.pop();
      } else if (m === p1 && shortv(m)) w.push("e");
    }
  }

  // Step 1c
  const k = w.length;
  if ((w[k - 1] === "y" || w[k - 1] === "Y") && k >= 3 && !vowel(w[k - 2])) w[k - 1] = "i";

  // Step 2
  for (const [s, by] of SK_STEP2) {
    if (!ends(s)) continue;
    const at = w.length - s.length;
    if (p1 <= at) {
      if (s === "ogi") {
        if (w[at - 1] === "l") replace(3, by);
      } else if (s === "li") {
        if (at >= 1 && "cdeghkmnrt".includes(w[at - 1])) replace(2, "");
      } else replace(s.length, by);
    }
    break;
  }

  // Step 3
  for (const [s, by] of SK_STEP3) {
    if (!ends(s)) continue;
    const at = w.length - s.length;
    if (p1 <= at && (s !== "ative" || p2 <= at)) replace(s.length, by);
    break;
  }

  // Step 4
  for (const s of SK_STEP4) {
    if (!ends(s)) continue;
    const at = w.length - s.length;
    if (p2 <= at && (s !== "ion" || (at >= 1 && (w[at - 1] === "s" || w[at - 1] === "t")))) replace(s.length, "");
    break;
  }

  // Step 5
  const e = w.length - 1;
  if (w[e] === "e" && (p2 <= e || (p1 <= e && !shortv(e)))) w.pop();
  else if (w[e] === "l" && p2 <= e && w[e - 1] === "l") w.pop();

  return str().replace(/Y/g, "y");
}

// -- the query, as sessionkit.store.search.parse_query reads it -----------------------------

// The store's words: runs of letters and digits (Python's [^\W_]+).
const SK_WORD = /[\p{L}\p{N}]+/gu;
// A word as a reader sees it, for marking and cutting snippets (Python's \w).
const SK_READ_WORD_CHAR = /[\p{L}\p{N}_]/u;

/** Case folding as Python's str.casefold for the letters whose lower case is not their folding. */
function skFold(word) {
  return word.toLowerCase().replace(/ß/g, "ss").replace(/ς/g, "σ");
}

function skParseQuery(text) {
  const terms = [];
  const phrases = [];
  String(text || "").split('"').forEach((chunk, i) => {
    const words = (chunk.match(SK_WORD) || []).map((x) => skStem(skFold(x)));
    if (!words.length) return;
    if (i % 2 === 1 && words.length > 1) {
      if (!phrases.some((p) => p.join(" ") === words.join(" "))) phrases.push(words);
    } else {
      for (const x of words) if (!terms.includes(x)) terms.push(x);
    }
  });
  return { terms, phrases };
}

// -- the index's files, each loaded once when a query needs it ------------------------------

const skSearchFiles = new Map();
window.skBundleSearchData = (name, payload) => {
  const entry = skSearchFiles.get(name);
  if (entry) entry.resolve(payload);
};

function skSearchFile(name) {
  if (!skSearchFiles.has(name)) {
    let resolve, reject;
    const promise = new Promise((ok, fail) => ((resolve = ok), (reject = fail)));
    skSearchFiles.set(name, { promise, resolve });
    const src = `data/search/${name}.js`;
    document.head.append(skEl("script", { src, onerror: () => reject(new Error("cannot read " + src)) }));
  }
  return skSearchFiles.get(name).promise;
}

/** The shard of a stem: FNV-1a (32 bits) of its UTF-8 bytes (as _bundle_search.shard_of). */
function skShardOf(stem, shards) {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(stem)) h = Math.imul(h ^ byte, 0x01000193) >>> 0;
  return h % shards;
}

/** A stem's postings: doc -> [[position, start, length], ...] (a Map; empty for an unknown stem). */
async function skPostings(stem, meta, cache) {
  if (cache.has(stem)) return cache.get(stem);
  const shard = await skSearchFile("t" + skShardOf(stem, meta.shards));
  const out = new Map();
  const entry = shard.find((x) => x[0] === stem);
  if (entry) {
    const flat = entry[1];
    for (let i = 0; i < flat.length; ) {
      const doc = flat[i], count = flat[i + 1];
      const occ = [];
      let pos = 0, start = 0;
      for (let j = 0; j < count; j++) {
        pos += flat[i + 2 + 3 * j];
        start += flat[i + 3 + 3 * j];
        occ.push([pos, start, flat[i + 4 + 3 * j]]);
      }
      out.set(doc, occ);
      i += 2 + 3 * count;
    }
  }
  cache.set(stem, out);
  return out;
}

/** Where a phrase occurs in each document holding all its words: doc -> [[start, end], ...]. */
function skPhraseSpans(words) {
  const out = new Map();
  for (const [doc, first] of words[0]) {
    const rest = words.slice(1).map((p) => p.get(doc));
    if (rest.some((x) => !x)) continue;
    const at = rest.map((occ) => new Map(occ.map((o) => [o[0], o])));
    const spans = [];
    for (const o of first) {
      let last = o;
      let ok = true;
      for (let k = 0; k < at.length && ok; k++) {
        last = at[k].get(o[0] + k + 1);
        ok = !!last;
      }
      if (ok) spans.push([o[1], last[1] + last[2]]);
    }
    if (spans.length) out.set(doc, spans);
  }
  return out;
}

// -- snippets, as sessionkit.store.search.snippet cuts them ----------------------------------

const SK_SNIPPET_WIDTH = 160;
const SK_SNIPPET_MARGIN = 512; // characters read on either side of the window: a word longer is cut there

async function skText(meta, doc, lo, hi) {
  // the characters [lo, hi) of a document's text, from the pieces holding them
  const [, , , , piece0] = meta.docs[doc];
  const chars = [];
  for (let p = Math.floor(lo / meta.piece); p * meta.piece < hi; p++) {
    const g = piece0 + p;
    let f = 0;
    while (f + 1 < meta.files.length && meta.files[f + 1] <= g) f++;
    const pieces = await skSearchFile("x" + f);
    chars.push(...Array.from(pieces[g - meta.files[f]]).map((ch, i) => [p * meta.piece + i, ch]));
  }
  const out = new Map();
  for (const [i, ch] of chars) if (i >= lo && i < hi) out.set(i, ch);
  return out;
}

async function skSnippet(meta, doc, spans) {
  const length = meta.docs[doc][5];
  spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const lo = Math.max(0, spans[0][0] - Math.floor(SK_SNIPPET_WIDTH / 3) - SK_SNIPPET_MARGIN);
  const hi = Math.min(length, Math.max(spans[0][0] + SK_SNIPPET_WIDTH, spans[0][1]) + SK_SNIPPET_MARGIN);
  const text = await skText(meta, doc, lo, hi);
  const at = (i) => text.get(i) || "";
  const inword = (i) => i >= lo && i < hi && SK_READ_WORD_CHAR.test(at(i));
  const widened = [];
  for (let [s, e] of spans) {
    if (s < lo || e > hi) continue;
    while (s > lo && inword(s - 1) && inword(s)) s--;
    while (e < hi && inword(e - 1) && inword(e)) e++;
    widened.push([s, e]);
  }
  widened.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const merged = [widened[0]];
  for (const [s, e] of widened.slice(1)) {
    const last = merged[merged.length - 1];
    if (s <= last[1]) last[1] = Math.max(last[1], e);
    else merged.push([s, e]);
  }
  const wordStart = (pos) => {
    while (pos > 0 && pos < length && inword(pos - 1) && inword(pos)) pos--;
    return pos;
  };
  const wordEnd = (pos) => {
    if (pos >= length) return length;
    while (pos > 0 && inword(pos - 1) && inword(pos)) pos--;
    return pos;
  };
  const first = merged[0];
  const start = wordStart(Math.max(0, first[0] - Math.floor(SK_SNIPPET_WIDTH / 3)));
  let end = Math.max(start + SK_SNIPPET_WIDTH, first[1]);
  if (end < length) {
    end = wordEnd(end);
    if (end <= first[1]) end = first[1];
  } else end = length;
  const slice = (a, b) => {
    let s = "";
    for (let i = a; i < b; i++) s += at(i);
    return s;
  };
  let body = "";
  let pos = start;
  for (const [s, e] of merged) {
    if (s < start || e > end) continue;
    body += slice(pos, s) + "[" + slice(s, e) + "]";
    pos = e;
  }
  body += slice(pos, end);
  if (start > 0) body = "…" + body.replace(/^\s+/, "");
  if (end < length) body = body.replace(/\s+$/, "") + "…";
  return body;
}

// -- the search ------------------------------------------------------------------------------

const SK_BM25_K1 = 1.2;
const SK_BM25_B = 0.75;

/** The best `limit` hits for `text`, as /api/search answers: {session_id, id, role, snippet, score}. */
async function skBundleSearch(text, limit) {
  const query = skParseQuery(text);
  if (!query.terms.length && !query.phrases.length) return [];
  const meta = await skSearchFile("meta");
  const cache = new Map();
  // each item of the query (its words, then its phrases, as the store's FTS5 query lists
  // them): the documents it occurs in, with its spans there
  const items = [];
  for (const t of query.terms) {
    const occ = await skPostings(t, meta, cache);
    items.push(new Map([...occ].map(([doc, o]) => [doc, o.map((x) => [x[1], x[1] + x[2]])])));
  }
  for (const p of query.phrases) {
    const words = [];
    for (const t of p) words.push(await skPostings(t, meta, cache));
    items.push(skPhraseSpans(words));
  }
  let matches = [...items[0].keys()].filter((doc) => items.every((m) => m.has(doc)));
  matches.sort((a, b) => b - a); // newest first: the candidates are the newest matches
  matches = matches.slice(0, meta.candidates);
  const rows = meta.rows;
  const avgdl = meta.tokens / rows;
  const idf = items.map((m) => {
    const v = Math.log((rows - m.size + 0.5) / (m.size + 0.5));
    return v <= 0 ? 1e-6 : v;
  });
  const scored = matches.map((doc) => {
    const length = meta.docs[doc][3];
    let score = 0;
    items.forEach((m, i) => {
      const f = m.get(doc).length;
      score += idf[i] * ((f * (SK_BM25_K1 + 1)) / (f + SK_BM25_K1 * (1 - SK_BM25_B + (SK_BM25_B * length) / avgdl)));
    });
    return [doc, score];
  });
  scored.sort((a, b) => b[1] - a[1] || b[0] - a[0]);
  const hits = [];
  for (const [doc, score] of scored.slice(0, Math.max(0, limit))) {
    const [sid, id, role] = meta.docs[doc];
    const spans = [];
    for (const m of items) spans.push(...m.get(doc));
    hits.push({ session_id: sid, id, role, score, snippet: await skSnippet(meta, doc, spans) });
  }
  return hits;
}
