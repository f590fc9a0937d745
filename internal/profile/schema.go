package profile

import _ "embed"

// ReportSchema is the JSON Schema (draft 2020-12) of WriteJSON's output.
// Its frames refer to the snapshot schema (snapshot.Schema) by its $id.
//
//go:embed report.schema.json
var ReportSchema []byte
