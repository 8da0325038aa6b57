// Runs memory tool inputs through the official TypeScript SDK helper, the way
// its tool runner does, for memdiff_test.go: one JSON input per line on
// stdin, one {"content","is_error"} line on stdout per input, in order.
//
//   node memdiff/sdk.mjs <base dir>   (the helper's memories live in <base dir>/memories)
import { createInterface } from 'node:readline';
import { BetaLocalFilesystemMemoryTool, betaMemoryTool } from '@anthropic-ai/sdk/tools/memory/node';
import { runRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';

const memory = await BetaLocalFilesystemMemoryTool.init(process.argv[2]);
const tool = betaMemoryTool(memory);
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  const { content, isError } = await runRunnableTool(tool, JSON.parse(line), {});
  process.stdout.write(JSON.stringify({ content, is_error: isError }) + '\n');
}
