// A mixed JavaScript workload for QuickJS (bench/qjs/qjs.c): objects and
// closures, sorting, strings and regular expressions, JSON, typed arrays,
// and the garbage they leave. One line per round, the same for every
// engine that runs it right: `qjs workload.js [ROUNDS]`.

const rounds = scriptArgs.length > 1 ? Number(scriptArgs[1]) : 20;

function random(seed) {
    let s = seed >>> 0;
    return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
}

function primes(n) {
    const composite = new Uint8Array(n + 1);
    let count = 0;
    for (let i = 2; i <= n; i++) {
        if (composite[i]) continue;
        count++;
        for (let j = i * i; j <= n; j += i) composite[j] = 1;
    }
    return count;
}

function sortRecords(rand, n) {
    const records = [];
    for (let i = 0; i < n; i++)
        records.push({ id: i, key: Math.floor(rand() * 1e6), name: "r" + i.toString(36) });
    records.sort((a, b) => a.key - b.key || a.id - b.id);
    let sum = 0;
    records.forEach((r, i) => { sum = (sum * 31 + r.id * (i + 1)) % 1000000007; });
    return sum;
}

function strings(rand, n) {
    const words = [];
    for (let i = 0; i < n; i++) {
        let w = "";
        const len = 3 + Math.floor(rand() * 8);
        for (let j = 0; j < len; j++) w += String.fromCharCode(97 + Math.floor(rand() * 26));
        words.push(w);
    }
    const text = words.join(" ");
    const vowels = (text.match(/[aeiou]/g) || []).length;
    const swapped = text.replace(/([a-z])([a-z]*)/g, (_, first, rest) => rest + first);
    let hash = 0;
    for (let i = 0; i < swapped.length; i++) hash = (Math.imul(hash, 33) + swapped.charCodeAt(i)) | 0;
    return vowels + "/" + (hash >>> 0).toString(16);
}

function json(rand, n) {
    const tree = { name: "root", children: [] };
    for (let i = 0; i < n; i++)
        tree.children.push({ i, x: rand().toFixed(4), tags: ["a" + (i % 7), "b" + (i % 11)], deep: { y: [i, i * 2] } });
    const text = JSON.stringify(tree);
    const back = JSON.parse(text);
    return text.length + ":" + back.children.reduce((s, c) => s + c.deep.y[1], 0);
}

function matrix(rand, n) {
    const a = new Float64Array(n * n), b = new Float64Array(n * n), c = new Float64Array(n * n);
    for (let i = 0; i < n * n; i++) { a[i] = rand(); b[i] = rand(); }
    for (let i = 0; i < n; i++)
        for (let k = 0; k < n; k++) {
            const aik = a[i * n + k];
            for (let j = 0; j < n; j++) c[i * n + j] += aik * b[k * n + j];
        }
    return c.reduce((s, v) => s + v, 0);
}

for (let round = 0; round < rounds; round++) {
    const rand = random(round + 1);
    print(round, primes(20000 + round), sortRecords(rand, 3000), strings(rand, 1500),
          json(rand, 300), matrix(rand, 40).toFixed(6));
}
print("done");
