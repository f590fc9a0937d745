package snapshot

import _ "embed"

// Schema is the JSON Schema (draft 2020-12) of a snapshot's JSON form.
//
//go:embed schema.json
var Schema []byte
