// Guest side of test/vm/ipvs.test.ts: runs the compiled IPVS reader (dist/) and
// prints one JSON line: the read result plus every raw reply as
// "service|dest SERVICE-INDEX HEX", in the order received.
import { readIpvs } from '../../dist/src/kernel/ipvs/reader.js';

const replies = [];
const result = await readIpvs({ onReply: (kind, msg, i) => replies.push(`${kind} ${i} ${msg.toString('hex')}`) });
process.stdout.write(`${JSON.stringify({ result, replies })}\n`);
