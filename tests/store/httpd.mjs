// httpd.mjs - a loopback HTTP server for the `power pull` tests (Node's
// built-in http module only). Serves the files of ROOT in several modes and
// mimics the Hugging Face file-list API; logs every request as one JSON line.
//
// usage: node httpd.mjs ROOT PORTFILE LOGFILE
//   listens on 127.0.0.1 (any free port, written to PORTFILE)
//
// Routes (NAME is a file under ROOT/files):
//   /files/NAME            the file; Range requests get 206 (or 416)
//   /etag/NAME             the same with ETag: "<its sha256>"
//   /badetag/NAME          the same with an ETag that is a wrong sha256
//   /wrong/NAME            bytes changed after the magic, with X-Linked-Etag
//                          of the real sha256 (a corrupt mirror)
//   /drop/N/NAME           a request without Range: headers for the whole file,
//                          N bytes, then the connection is dropped
//   /slowfirst/R/NAME      a request without Range is sent at R bytes per
//                          100 ms; a Range request at full speed
//   /slow/R/NAME           every request at R bytes per 100 ms
//   /redirect/REST         302 to http://localhost:PORT/REST (another host name)
//   /huge/NAME             announces a Content-Length of 10^15 bytes
//   /auth/NAME             401 without "Authorization: Bearer secret"
//   /api/models/ORG/REPO/tree/main   JSON list of ROOT/hf/ORG/REPO as the Hugging
//                          Face API gives it (type, path, size, oid, lfs {oid,size})
//   /ORG/REPO/resolve/main/PATH  302 to http://localhost:PORT/cdn/ORG/REPO/PATH
//                          with X-Linked-Etag and X-Linked-Size, as the Hub does
//   /cdn/ORG/REPO/PATH     the file (Range supported)
// A repository with a file named .gated answers 401 to requests without
// "Authorization: Bearer secret".
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const [root, portFile, logFile] = process.argv.slice(2);
if (!root || !portFile || !logFile) {
  console.error('usage: node httpd.mjs ROOT PORTFILE LOGFILE');
  process.exit(2);
}
let port = 0;
const digests = new Map();

function sha256(file) {
  if (!digests.has(file)) digests.set(file, createHash('sha256').update(fs.readFileSync(file)).digest('hex'));
  return digests.get(file);
}

// A path inside base, or null (no way out of ROOT).
function inside(base, rel) {
  const p = path.resolve(base, rel);
  return p.startsWith(path.resolve(base) + path.sep) ? p : null;
}

function parseRange(h, size) {
  const m = /^bytes=(\d+)-(\d*)$/.exec(h || '');
  if (!m) return null;
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  return { start, end };
}

// Sends data (a Buffer) honouring Range; opts: rate (bytes per 100 ms),
// dropAt (bytes, then destroy), headers, announce (fake Content-Length).
function sendBody(req, res, data, opts = {}) {
  const size = data.length;
  const headers = { 'Content-Type': 'application/octet-stream', 'Accept-Ranges': 'bytes', ...(opts.headers || {}) };
  let start = 0;
  let end = size - 1;
  let status = 200;
  if (req.headers.range) {
    const r = parseRange(req.headers.range, size);
    if (!r || r.start >= size) {
      res.writeHead(416, { 'Content-Range': `bytes */${size}` });
      return res.end();
    }
    ({ start, end } = r);
    status = 206;
    headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
  }
  headers['Content-Length'] = String(opts.announce ?? end - start + 1);
  res.writeHead(status, headers);
  if (req.method === 'HEAD') return res.end();
  const body = data.subarray(start, end + 1);
  if (opts.dropAt !== undefined) {
    res.write(body.subarray(0, opts.dropAt), () => setTimeout(() => res.socket && res.socket.destroy(), 50));
    return;
  }
  if (!opts.rate) return res.end(body);
  let off = 0;
  const tick = () => {
    if (res.destroyed || (res.socket && res.socket.destroyed)) return;
    const chunk = body.subarray(off, off + opts.rate);
    off += chunk.length;
    if (off >= body.length) return res.end(chunk);
    res.write(chunk);
    setTimeout(tick, 100);
  };
  tick();
}

function fileOf(dir, rel, res) {
  const p = inside(dir, rel);
  if (!p || !fs.existsSync(p) || !fs.statSync(p).isFile()) {
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    res.end('not found\n');
    return null;
  }
  return p;
}

function gated(repoDir, req, res) {
  if (!fs.existsSync(path.join(repoDir, '.gated'))) return false;
  if (req.headers.authorization === 'Bearer secret') return false;
  res.writeHead(401, { 'Content-Type': 'text/plain' });
  res.end('unauthorized\n');
  return true;
}

function listTree(dir, prefix = '') {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    if (e.name.startsWith('.')) continue;
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    const full = path.join(dir, e.name);
    if (e.isDirectory()) {
      out.push({ type: 'directory', oid: '0'.repeat(40), size: 0, path: rel });
      out.push(...listTree(full, rel));
    } else {
      const size = fs.statSync(full).size;
      out.push({ type: 'file', oid: '1'.repeat(40), size, path: rel, lfs: { oid: sha256(full), size, pointerSize: 133 } });
    }
  }
  return out;
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const p = decodeURIComponent(url.pathname);
  fs.appendFileSync(
    logFile,
    JSON.stringify({ method: req.method, path: p, host: req.headers.host || '', range: req.headers.range || '', auth: req.headers.authorization || '' }) + '\n',
  );
  const parts = p.split('/').filter(Boolean);
  const files = path.join(root, 'files');
  const hf = path.join(root, 'hf');
  let m;
  if (parts[0] === 'files' || parts[0] === 'etag' || parts[0] === 'badetag' || parts[0] === 'huge' || parts[0] === 'auth') {
    if (parts[0] === 'auth' && req.headers.authorization !== 'Bearer secret') {
      res.writeHead(401);
      return res.end();
    }
    const f = fileOf(files, parts.slice(1).join('/'), res);
    if (!f) return;
    const headers = {};
    if (parts[0] === 'etag') headers.ETag = `"${sha256(f)}"`;
    if (parts[0] === 'badetag') headers.ETag = `"${'ab'.repeat(32)}"`;
    return sendBody(req, res, fs.readFileSync(f), { headers, announce: parts[0] === 'huge' ? 1e15 : undefined });
  }
  if (parts[0] === 'wrong') {
    const f = fileOf(files, parts.slice(1).join('/'), res);
    if (!f) return;
    const data = Buffer.from(fs.readFileSync(f));
    for (let i = 1000; i < data.length; i += 4096) data[i] ^= 0x5a;
    return sendBody(req, res, data, { headers: { 'X-Linked-Etag': `"${sha256(f)}"` } });
  }
  if ((parts[0] === 'drop' || parts[0] === 'slowfirst' || parts[0] === 'slow') && parts.length >= 3) {
    const n = Number(parts[1]);
    const f = fileOf(files, parts.slice(2).join('/'), res);
    if (!f) return;
    const opts = {};
    if (parts[0] === 'drop' && !req.headers.range) opts.dropAt = n;
    if (parts[0] === 'slow' || (parts[0] === 'slowfirst' && !req.headers.range)) opts.rate = n;
    return sendBody(req, res, fs.readFileSync(f), opts);
  }
  if (parts[0] === 'redirect') {
    res.writeHead(302, { Location: `http://localhost:${port}/${parts.slice(1).join('/')}` });
    return res.end();
  }
  if ((m = /^\/api\/models\/([^/]+)\/([^/]+)\/tree\/main$/.exec(p))) {
    const dir = inside(hf, `${m[1]}/${m[2]}`);
    if (!dir || !fs.existsSync(dir)) {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      return res.end('{"error":"Repository not found"}');
    }
    if (gated(dir, req, res)) return;
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify(listTree(dir)));
  }
  if (parts.length >= 5 && parts[2] === 'resolve' && parts[3] === 'main') {
    const dir = inside(hf, `${parts[0]}/${parts[1]}`);
    if (!dir || !fs.existsSync(dir)) {
      res.writeHead(404);
      return res.end();
    }
    if (gated(dir, req, res)) return;
    const f = fileOf(dir, parts.slice(4).join('/'), res);
    if (!f) return;
    res.writeHead(302, {
      Location: `http://localhost:${port}/cdn/${parts[0]}/${parts[1]}/${parts.slice(4).join('/')}`,
      'X-Linked-Etag': `"${sha256(f)}"`,
      'X-Linked-Size': String(fs.statSync(f).size),
    });
    return res.end();
  }
  if (parts[0] === 'cdn' && parts.length >= 4) {
    const f = fileOf(path.join(hf, parts[1], parts[2]), parts.slice(3).join('/'), res);
    if (!f) return;
    return sendBody(req, res, fs.readFileSync(f));
  }
  res.writeHead(404);
  res.end();
});

server.listen(0, '127.0.0.1', () => {
  port = server.address().port;
  fs.writeFileSync(portFile + '.tmp', String(port));
  fs.renameSync(portFile + '.tmp', portFile);
});
