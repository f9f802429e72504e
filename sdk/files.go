package sdk

import _ "embed"

// Python is the Python SDK, the module opkit_handler (python/opkit_handler.py):
// opkit init copies it beside a Python handler.
//
//go:embed python/opkit_handler.py
var Python []byte

// TypeScript is the TypeScript SDK's source (typescript/opkit.ts): opkit
// init copies it, with TypeScriptJS, beside a TypeScript handler.
//
//go:embed typescript/opkit.ts
var TypeScript []byte

// TypeScriptJS is what tsc makes of TypeScript (typescript/opkit.js), so
// that a project opkit init writes runs as written.
//
//go:embed typescript/opkit.js
var TypeScriptJS []byte

// TypeScriptVersion is the TypeScript compiler the SDK is built and
// checked with (the Makefile's TYPESCRIPT_VERSION; internal/sdktools).
const TypeScriptVersion = "5.9.3"
