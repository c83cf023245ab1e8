// The book's explorers: plain JavaScript, no library, no network. Python
// (vitbook/book/explorers.py) inlines this file and a JSON blob into each
// explorer's HTML output; `VitExplorers.mount(root, data)` draws it. Each copy redefines it,
// so an output stored by an older version of the book never mounts a newer one's data.
window.VitExplorers = (() => {
  // Small DOM helpers ---------------------------------------------------------------------
  const el = (tag, attrs = {}, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
    }
    e.append(...children);
    return e;
  };
  const fmt = n => n.toLocaleString('en-US');
  const human = (n, unit = '') => {  // 86.6M, 17.6G, ...
    const steps = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
    for (const [size, suffix] of steps) if (n >= size) return (n / size).toFixed(1) + suffix + unit;
    return n + unit;
  };
  // A labelled control; `input` gets the class vx-in and the label text as its aria-label.
  const field = (label, input) => {
    input.classList.add('vx-in');
    input.setAttribute('aria-label', label);
    return el('label', { class: 'vx-field' }, label + ' ', input);
  };
  const slider = (min, max, step, value, oninput) =>
    el('input', { type: 'range', min, max, step, value, oninput });
  const select = (options, onchange) => el('select', { onchange },
    ...options.map(([value, text]) => el('option', { value }, text)));
  // base64 -> Uint8Array (the precomputed maps, quantised to 0..255)
  const bytes = b64 => Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  // A blue-to-yellow colour for t in [0, 1]
  const colour = (t, alpha = 1) =>
    `rgba(${Math.round(255 * t)},${Math.round(80 + 150 * t)},${Math.round(255 * (1 - t))},${alpha})`;
  // Draw a grid x grid map of values (0..1) over the canvas, optionally above an image.
  const heat = (canvas, values, rows, cols, image, alpha) => {
    const ctx = canvas.getContext('2d');
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    if (image) ctx.drawImage(image, 0, 0, canvas.width, canvas.height);
    const w = canvas.width / cols, h = canvas.height / rows;
    values.forEach((v, i) => {
      ctx.fillStyle = colour(v, alpha);
      ctx.fillRect((i % cols) * w, Math.floor(i / cols) * h, w, h);
    });
  };
  // Which cell of a rows x cols grid a click on the canvas hit
  const cellAt = (canvas, event, rows, cols) => {
    const r = canvas.getBoundingClientRect();
    const col = Math.min(cols - 1, Math.floor((event.clientX - r.left) / r.width * cols));
    const row = Math.min(rows - 1, Math.floor((event.clientY - r.top) / r.height * rows));
    return row * cols + col;
  };
  // Click a cell, or focus the canvas and move a cursor with the arrow keys: pick(cell).
  // `size` gives the grid's [rows, cols] now, and `current` the cell picked now (both may
  // change between events).
  const cellPicker = (canvas, size, pick, current) => {
    canvas.tabIndex = 0;
    canvas.addEventListener('click', e => pick(cellAt(canvas, e, ...size())));
    canvas.addEventListener('keydown', e => {
      const step = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[e.key];
      if (!step) return;
      e.preventDefault();
      const [rows, cols] = size(), cell = current();
      const row = Math.min(rows - 1, Math.max(0, Math.floor(cell / cols) + step[0]));
      const col = Math.min(cols - 1, Math.max(0, cell % cols + step[1]));
      pick(row * cols + col);
    });
  };
  const loadImage = src => { const img = new Image(); img.src = src; return img; };

  // Model sizes: the same counts as vitbook.models.complexity -------------------------------
  // c: {kind: 'vit'|'vit_lite'|'cvt'|'cct', img, channels, patch, dim, depth, heads,
  //     mlp_ratio, classes, conv_layers, kernel, stride, padding, in_planes}
  const convOut = (n, k, s, p) => Math.floor((n + 2 * p - k) / s) + 1;
  function tokenizer(c) {  // -> {grid, params, macs} of the patch or conv tokenizer
    if (c.kind !== 'cct') {  // one conv, kernel = stride = patch, with a bias
      const grid = Math.floor(c.img / c.patch);
      const weights = c.channels * c.patch * c.patch * c.dim;
      return { grid, params: weights + c.dim, macs: grid * grid * weights };
    }
    let size = c.img, params = 0, macs = 0, cin = c.channels;
    for (let i = 0; i < c.conv_layers; i++) {  // [conv (no bias), ReLU, max-pool 3/2/1]
      const cout = i === c.conv_layers - 1 ? c.dim : c.in_planes;
      size = convOut(size, c.kernel, c.stride, c.padding);
      params += cin * cout * c.kernel * c.kernel;
      macs += size * size * cout * cin * c.kernel * c.kernel;
      size = convOut(size, 3, 2, 1);
      cin = cout;
    }
    return { grid: size, params, macs };
  }
  function modelSize(c) {
    const tok = tokenizer(c);
    const n = tok.grid * tok.grid;
    const cls = c.kind === 'vit' || c.kind === 'vit_lite';  // a class token, else SeqPool
    const t = n + (cls ? 1 : 0);  // tokens in the encoder
    const d = c.dim, hidden = Math.floor(d * c.mlp_ratio + 1e-9);  // int(dim * mlp_ratio)
    const qkvBias = c.kind === 'vit' ? 3 * d : 0;
    const block = 2 * d + (3 * d * d + qkvBias) + (d * d + d) + 2 * d
      + (d * hidden + hidden) + (hidden * d + d);
    const pool = cls ? d : d + 1;  // class token, or SeqPool's Linear(dim, 1)
    const params = tok.params + pool + t * d + c.depth * block + 2 * d + d * c.classes + c.classes;
    const linear = c.depth * t * (3 * d * d + d * d + 2 * d * hidden)
      + (cls ? 0 : n * d) + d * c.classes;
    const attention = c.depth * 2 * t * t * d + (cls ? 0 : n * d);  // QK^T, AV; SeqPool's sum
    // Training activations kept per image (float32, approximate): per block the norms'
    // inputs and outputs, q, k, v, the heads' output, two hidden-width tensors, and the
    // attention weights before and after dropout.
    const memory = 4 * c.depth * (t * (8 * d + 2 * hidden) + 2 * c.heads * t * t);
    return { tokens: t, params, macs: tok.macs + linear + attention, memory };
  }

  // Why the package would refuse this configuration, or '' if it would build it.
  function check(c) {
    if (![c.img, c.dim, c.depth, c.heads, c.mlp_ratio].every(v => v > 0)) return 'every size must be positive';
    if (c.dim % c.heads) return `dim ${c.dim} is not divisible by ${c.heads} heads`;
    if (c.kind !== 'cct' && c.img % c.patch) return `image size ${c.img} is not a multiple of the patch size`;
    if (tokenizer(c).grid < 1) return 'the image is too small for this tokenizer';
    return '';
  }

  function sizeCalculator(root, data) {
    const names = Object.keys(data.presets);
    const inputs = {}, out = el('div', { class: 'vx-out', 'aria-live': 'polite' });
    const labels = data.fields, keys = Object.keys(labels);  // configuration key -> label
    let config;
    const update = () => {
      const kernel = config.kernel;
      for (const k of keys) config[k] = Number(inputs[k].value);
      if (config.kind === 'cct' && config.kernel !== kernel) {  // the CCT class's defaults
        config.stride = Math.max(1, Math.floor(config.kernel / 2) - 1);
        config.padding = Math.max(1, Math.floor(config.kernel / 2));
      }
      for (const k of ['patch', 'conv_layers', 'kernel'])  // only what this kind of model has
        inputs[k].parentElement.hidden = (k === 'patch') === (config.kind === 'cct');
      const problem = check(config);
      if (problem) return out.replaceChildren(el('div', { class: 'vx-problem' }, problem));
      const s = modelSize(config);
      out.replaceChildren(
        el('div', {}, 'tokens ', el('b', { class: 'vx-tokens' }, fmt(s.tokens))),
        el('div', {}, 'parameters ', el('b', { class: 'vx-params' }, fmt(s.params)), ` (${human(s.params)})`),
        el('div', {}, 'multiply-adds ', el('b', { class: 'vx-macs' }, fmt(s.macs)), ` (${human(s.macs)})`),
        el('div', {}, 'activations a training step keeps, per image \u2248 ',
          el('b', {}, human(s.memory, 'B'))));
    };
    const choose = name => {
      config = { ...data.presets[name] };
      for (const k of keys) inputs[k].value = config[k] ?? 1;
      update();
    };
    for (const k of keys)
      inputs[k] = el('input', { type: 'number', min: k === 'mlp_ratio' ? 0.25 : 1,
        step: k === 'mlp_ratio' ? 0.25 : 1, oninput: update });
    const preset = select(names.map(n => [n, n]), e => choose(e.target.value));
    root.append(el('div', { class: 'vx-controls' }, field('preset', preset),
      ...keys.map(k => field(labels[k], inputs[k]))), out);
    choose(names[0]);
  }

  // Learning-rate schedule: vitbook.training.optim.warmup_cosine_schedule's factor ----------
  function scheduleFactor(step, warmup, total, minFactor) {
    if (step < warmup) return Math.min(1, (step + 1) / warmup);
    const progress = (step - warmup) / Math.max(1, total - warmup);
    return minFactor + (1 - minFactor) * 0.5 * (1 + Math.cos(Math.PI * Math.min(progress, 1)));
  }

  function scheduleExplorer(root, data) {
    const s = { ...data.initial };
    const canvas = el('canvas', { width: 640, height: 260, class: 'vx-canvas', role: 'img',
      'aria-label': 'learning rate against step' });
    const bars = el('canvas', { width: 320, height: 260, class: 'vx-canvas', role: 'img',
      'aria-label': 'label-smoothed target distribution' });
    const readout = el('div', { class: 'vx-out', 'aria-live': 'polite' });
    const draw = () => {
      const ctx = canvas.getContext('2d'), w = canvas.width, h = canvas.height, pad = 30;
      ctx.clearRect(0, 0, w, h);
      ctx.strokeStyle = '#888'; ctx.strokeRect(pad, 10, w - pad - 10, h - pad - 10);
      ctx.beginPath(); ctx.strokeStyle = '#1f77b4'; ctx.lineWidth = 2;
      for (let i = 0; i <= 200; i++) {
        const step = Math.round(i / 200 * (s.total - 1));
        const lr = s.peak * scheduleFactor(step, s.warmup, s.total, s.final / s.peak);
        const x = pad + (w - pad - 10) * i / 200, y = h - pad - (h - pad - 20) * lr / s.peak;
        i ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
      }
      ctx.stroke();
      ctx.fillStyle = '#444';
      ctx.fillText('LR', 4, 18);
      ctx.fillText('0', pad - 10, h - pad + 12);
      ctx.fillText(`step ${s.total}`, w - 60, h - pad + 14);
      // Label smoothing: the target of the true class and of each of the others
      const b = bars.getContext('2d'), k = data.classes, eps = s.smoothing;
      b.clearRect(0, 0, bars.width, bars.height);
      const bw = (bars.width - 20) / k;
      for (let c = 0; c < k; c++) {
        const p = (c === 0 ? 1 - eps : 0) + eps / k;
        b.fillStyle = c === 0 ? '#1f77b4' : '#ff7f0e';
        b.fillRect(10 + c * bw + 2, bars.height - 20 - p * (bars.height - 40), bw - 4,
          p * (bars.height - 40));
      }
      const mid = Math.floor(s.total / 2);
      readout.textContent = `peak ${s.peak} at step ${Math.max(0, Math.ceil(s.warmup) - 1)}; step ${mid}: ` +
        `${(s.peak * scheduleFactor(mid, s.warmup, s.total, s.final / s.peak)).toExponential(3)}; ` +
        `targets: true class ${(1 - eps + eps / k).toFixed(3)}, others ${(eps / k).toFixed(3)}`;
    };
    const control = (key, label, min, max, step) => {
      const input = slider(min, max, step, s[key], e => {
        s[key] = Number(e.target.value);
        s.warmup = Math.min(s.warmup, s.total);
        s.final = Math.min(s.final, s.peak);
        draw();
      });
      return field(label, input);
    };
    // data.controls: [key, label, min, max, step] of each slider, as the live explorer's
    root.append(el('div', { class: 'vx-controls' }, ...data.controls.map(c => control(...c))),
    el('div', { class: 'vx-row' }, canvas, bars), readout);
    draw();
  }

  // Patches and positions ----------------------------------------------------------------
  // Position embeddings of n positions, as the package makes them: "sinusoidal" is
  // going_modular.models.layers.sinusoidal_embedding (sine and cosine interleaved), "random"
  // a learned table at its initialisation, normal draws (a cosine does not see their scale).
  function positionTable(kind, n, dim, seed = 0) {
    const table = new Float32Array(n * dim);
    if (kind === 'sinusoidal') {
      for (let i = 0; i < dim; i++) {
        const rate = 10000 ** (-2 * Math.floor(i / 2) / dim), wave = i % 2 ? Math.cos : Math.sin;
        for (let p = 0; p < n; p++) table[p * dim + i] = wave(p * rate);
      }
      return table;
    }
    let state = seed >>> 0;
    const uniform = () => {  // mulberry32: a small seeded generator
      state = (state + 0x6D2B79F5) >>> 0;
      let t = Math.imul(state ^ (state >>> 15), 1 | state);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    for (let j = 0; j < table.length; j += 2) {  // Box-Muller: two normal draws
      const r = Math.sqrt(-2 * Math.log(1 - uniform())), a = 2 * Math.PI * uniform();
      table[j] = r * Math.cos(a);
      if (j + 1 < table.length) table[j + 1] = r * Math.sin(a);
    }
    return table;
  }
  // The cosine similarity of position p's embedding to each position's, from -1 to 1
  function positionSimilarity(table, dim, p) {
    const n = table.length / dim, row = table.subarray(p * dim, (p + 1) * dim);
    const norm = v => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));
    const own = norm(row);
    return Array.from({ length: n }, (_, q) => {
      const other = table.subarray(q * dim, (q + 1) * dim);
      let dot = 0;
      for (let i = 0; i < dim; i++) dot += row[i] * other[i];
      return dot / (own * norm(other) || 1);
    });
  }

  function patchExplorer(root, data) {
    const image = loadImage(data.image);
    const size = data.size;  // the image's side in pixels of the model's input
    const canvas = el('canvas', { width: 320, height: 320, class: 'vx-canvas', role: 'img',
      'aria-label': 'the image cut into patches' });
    const strip = el('canvas', { width: 640, height: 40, class: 'vx-canvas vx-strip', role: 'img',
      'aria-label': 'the patches as a sequence' });
    const similarity = el('canvas', { width: 240, height: 240, class: 'vx-canvas', role: 'img',
      'aria-label': 'cosine similarity of position embeddings; click a position' });
    const info = el('div', { class: 'vx-out', 'aria-live': 'polite' });
    const simInfo = el('div', { class: 'vx-out', 'aria-live': 'polite' });
    const tables = {};  // kind and grid -> the table, made when first shown
    let patch = data.patch_sizes[0], name = Object.keys(data.kinds)[0], position = 0;
    const grid = () => Math.floor(size / patch);
    const drawPatches = () => {
      const ctx = canvas.getContext('2d'), g = grid();
      ctx.drawImage(image, 0, 0, canvas.width, canvas.height);
      ctx.strokeStyle = '#fff'; ctx.lineWidth = 1;
      for (let i = 1; i < g; i++) {
        const x = i * canvas.width / g;
        ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, canvas.height); ctx.stroke();
        ctx.beginPath(); ctx.moveTo(0, x); ctx.lineTo(canvas.width, x); ctx.stroke();
      }
      // The sequence: patches in row-major order, as many as fit
      const s = strip.getContext('2d'), cell = strip.height, fit = Math.floor(strip.width / (cell + 2));
      s.clearRect(0, 0, strip.width, strip.height);
      const src = image.naturalWidth / g;
      for (let i = 0; i < Math.min(fit, g * g); i++)
        s.drawImage(image, (i % g) * src, Math.floor(i / g) * src, src, src, i * (cell + 2), 0, cell, cell);
      info.textContent = `patch ${patch}x${patch}: grid ${g}x${g}, N = HW/P\u00b2 = ` +
        `${size}\u00b7${size}/${patch}\u00b2 = ${g * g} tokens (+1 class token)` +
        (g * g > fit ? `; the strip shows the first ${fit}` : '');
    };
    const drawSimilarity = () => {
      const g = grid(), kind = data.kinds[name], key = `${kind} ${g}`;
      tables[key] = tables[key] || positionTable(kind, g * g, data.dim, data.seed);
      const row = positionSimilarity(tables[key], data.dim, position);
      heat(similarity, row.map(v => (v + 1) / 2), g, g, null, 1);
      const ctx = similarity.getContext('2d'), w = similarity.width / g;
      ctx.strokeStyle = '#000'; ctx.lineWidth = 2;
      ctx.strokeRect((position % g) * w, Math.floor(position / g) * w, w, w);
      simInfo.textContent = `${name}: similarity of position (${Math.floor(position / g)}, ` +
        `${position % g}) to every other (the ${g}x${g} grid of P = ${patch}; yellow = 1, blue = -1)`;
    };
    cellPicker(similarity, () => [grid(), grid()], cell => { position = cell; drawSimilarity(); },
      () => position);
    const patchSlider = slider(0, data.patch_sizes.length - 1, 1, 0, e => {
      const before = grid(), r = Math.floor(position / before), c = position % before;
      patch = data.patch_sizes[Number(e.target.value)];
      const g = grid();  // the same place in the new grid
      position = Math.floor(r * g / before) * g + Math.floor(c * g / before);
      drawPatches(); drawSimilarity();
    });
    const kindSelect = select(Object.keys(data.kinds).map(k => [k, k]), e => {
      name = e.target.value; drawSimilarity();
    });
    root.append(el('div', { class: 'vx-controls' }, field('patch size', patchSlider)),
      el('div', { class: 'vx-row' }, canvas, el('div', {}, field('position embedding', kindSelect),
        similarity)), strip, info, simInfo);
    image.onload = drawPatches;
    if (image.complete) drawPatches();
    drawSimilarity();
  }

  // Attention ----------------------------------------------------------------------------
  // data.images[i].raw: (layers, heads, queries, patches) bytes, each row scaled to its
  // largest weight, raw_max: those largest weights; .rollout and .rollout_max: the same for
  // (queries, patches); .pool: SeqPool's (patches) weights or null. data.queries: the stored
  // query tokens (-1 = the class token, else a patch index).
  function attentionExplorer(root, data) {
    const g = data.grid, n = g * g, q = data.queries.length;
    const images = data.images.map(d => ({ img: loadImage(d.src), raw: bytes(d.raw),
      rawMax: d.raw_max, rollout: bytes(d.rollout), rolloutMax: d.rollout_max,
      pool: d.pool && bytes(d.pool), label: d.label }));
    const canvas = el('canvas', { width: 320, height: 320, class: 'vx-canvas', role: 'img',
      'aria-label': 'attention over the image; click a patch' });
    const info = el('div', { class: 'vx-out', 'aria-live': 'polite' });
    // The colour scale: the map's colours from 0 to its largest weight
    const stops = [0, 0.25, 0.5, 0.75, 1].map(t => `${colour(t)} ${100 * t}%`).join(', ');
    const scaleTop = el('span', {});
    const scale = el('div', { class: 'vx-scale' }, el('span', {}, '0'),
      el('span', { class: 'vx-scale-bar', style: `background: linear-gradient(to right, ${stops})` }),
      scaleTop);
    const s = { image: 0, layer: data.layers - 1, head: -1, mode: 'raw', query: 0, clicked: null };
    const draw = () => {
      const im = images[s.image];
      let values = new Float32Array(n), what;
      if (s.mode === 'pool') {
        values = Array.from(im.pool, v => v / 255); what = 'SeqPool weights';
      } else if (s.mode === 'rollout') {
        const top = im.rolloutMax[s.query] / 255;
        values = Array.from(im.rollout.subarray(s.query * n, (s.query + 1) * n), v => v * top);
        what = 'rollout';
      } else {
        const heads = s.head < 0 ? [...Array(data.heads).keys()] : [s.head];
        for (const h of heads) {
          const row = (s.layer * data.heads + h) * q + s.query;
          const top = im.rawMax[row] / 255 / heads.length;
          for (let i = 0; i < n; i++) values[i] += im.raw[row * n + i] * top;
        }
        what = `layer ${s.layer + 1}, ${s.head < 0 ? 'mean of heads' : 'head ' + (s.head + 1)}`;
      }
      const top = Math.max(...values) || 1;
      heat(canvas, Array.from(values, v => v / top), g, g, im.img, 0.55);
      const token = data.queries[s.query];
      if (s.mode !== 'pool' && token >= 0) {  // outline the query patch
        const ctx = canvas.getContext('2d'), w = canvas.width / g;
        const x = (token % g) * w, y = Math.floor(token / g) * w;
        ctx.lineWidth = 3; ctx.strokeStyle = '#000'; ctx.strokeRect(x + 1.5, y + 1.5, w - 3, w - 3);
        ctx.lineWidth = 1; ctx.strokeStyle = '#fff'; ctx.strokeRect(x + 1.5, y + 1.5, w - 3, w - 3);
      }
      scaleTop.textContent = s.mode === 'pool' ? 'largest weight' :
        `${top.toPrecision(2)} (spread evenly over its ${data.keys} keys, each would get ` +
        `${(1 / data.keys).toPrecision(2)})`;
      const nearest = s.clicked !== null && s.clicked !== token ?
        ` (the stored query nearest to patch (${Math.floor(s.clicked / g)}, ${s.clicked % g}))` : '';
      info.textContent = `${im.label ? im.label + ': ' : ''}${what}` + (s.mode === 'pool' ? '' :
        `, query ${token < 0 ? 'the class token' : `patch (${Math.floor(token / g)}, ${token % g})`}` +
        nearest);
    };
    // A clicked patch: itself if stored, else the nearest stored query patch
    cellPicker(canvas, () => [g, g], cell => {
      const r = Math.floor(cell / g), c = cell % g;
      let best = s.query, dist = Infinity;
      data.queries.forEach((t, i) => {
        if (t < 0) return;
        const d = (Math.floor(t / g) - r) ** 2 + (t % g - c) ** 2;
        if (d < dist) { dist = d; best = i; }
      });
      s.query = best; s.clicked = cell; if (s.mode === 'pool') s.mode = 'raw';
      modeSelect.value = s.mode; draw();
    }, () => Math.max(0, data.queries[s.query]));
    const pick = (key, options, label) => {
      const e = select(options, ev => { s[key] = key === 'mode' ? ev.target.value : Number(ev.target.value); draw(); });
      e.value = String(s[key]);
      return [e, field(label, e)];
    };
    const range = k => [...Array(k).keys()];
    const modes = [['raw', 'raw attention'], ['rollout', 'rollout']];
    if (images.every(im => im.pool)) modes.push(['pool', 'SeqPool weights']);
    const [modeSelect, modeField] = pick('mode', modes, 'show');
    const queryButton = el('button', { type: 'button', class: 'vx-in', onclick: () => {
      s.query = Math.max(0, data.queries.indexOf(-1)); s.clicked = null; draw(); } }, 'class token');
    root.append(el('div', { class: 'vx-controls' },
      pick('image', images.map((im, i) => [i, im.label || `image ${i + 1}`]), 'image')[1],
      pick('layer', range(data.layers).map(i => [i, i + 1]), 'layer')[1],
      pick('head', [[-1, 'mean']].concat(range(data.heads).map(i => [i, i + 1])), 'head')[1],
      modeField, ...(data.queries.includes(-1) ? [queryButton] : [])), canvas, scale, info);
    images.forEach(im => { im.img.onload = draw; });
    draw();
  }

  const kinds = { size: sizeCalculator, schedule: scheduleExplorer, patch: patchExplorer,
    attention: attentionExplorer };
  return { mount: (root, data) => kinds[data.kind](root, data), modelSize, scheduleFactor,
    positionTable, positionSimilarity };
})();
