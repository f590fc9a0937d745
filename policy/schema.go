package policy

import (
	"bytes"
	_ "embed"
)

//go:embed schema.json
var schema []byte

// Schema returns the JSON Schema (draft-07) of the rule file. It checks
// structure only: Parse also checks templates, globs, conditions, Rego and
// the files a rule file refers to.
func Schema() []byte { return bytes.Clone(schema) }
