// Reads a WARC file with warcio.js, an implementation that is not ours, and
// prints one JSON line per record with whether its digests verify.
// Usage: node check.mjs FILE.warc.gz
import { createReadStream } from "node:fs";
import { createHash } from "node:crypto";
import { WARCParser } from "warcio";

const B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
function base32(buf) {
  let bits = 0, value = 0, out = "";
  for (const b of buf) {
    value = (value << 8) | b; bits += 8;
    while (bits >= 5) { out += B32[(value >>> (bits - 5)) & 31]; bits -= 5; }
  }
  if (bits > 0) out += B32[(value << (5 - bits)) & 31];
  while (out.length % 8) out += "=";
  return out;
}
const sha1 = (b) => "sha1:" + base32(createHash("sha1").update(b).digest());

function indexOf(hay, needle) {
  outer: for (let i = 0; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

const parser = new WARCParser(createReadStream(process.argv[2]), { parseHttp: false });
for await (const record of parser) {
  const block = await record.readFully();
  const out = {
    type: record.warcType,
    uri: record.warcTargetURI ?? "",
    length: record.warcContentLength,
    blockLength: block.length,
    blockDigestOK: record.warcBlockDigest ? sha1(block) === record.warcBlockDigest : null,
    payloadDigestOK: null,
  };
  if (record.warcType === "response" && record.warcPayloadDigest) {
    const end = indexOf(block, Buffer.from("\r\n\r\n"));
    const head = Buffer.from(block.subarray(0, end)).toString("latin1").toLowerCase();
    if (end >= 0 && !head.includes("transfer-encoding: chunked")) {
      out.payloadDigestOK = sha1(block.subarray(end + 4)) === record.warcPayloadDigest;
    }
  }
  console.log(JSON.stringify(out));
}
