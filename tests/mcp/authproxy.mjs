// A loopback HTTP proxy that adds "Authorization: Bearer TOKEN" to every
// request it forwards to TARGET (the conformance suite sends no token).
// usage: node authproxy.mjs TARGET_URL TOKEN   (prints "listening PORT")
import http from "node:http";

const target = new URL(process.argv[2]);
const token = process.argv[3];
const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}`, host: target.host };
  const up = http.request(
    { host: target.hostname, port: target.port, path: req.url, method: req.method, headers },
    (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    },
  );
  up.on("error", () => res.destroy());
  res.on("close", () => {
    if (!res.writableEnded) up.destroy();
  });
  req.pipe(up);
});
server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
