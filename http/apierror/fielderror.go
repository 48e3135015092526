package apierror

import "github.com/mcpgw/aggregator/internal/strictjson"

// FieldError is one entry of a 422 body's detail list, in FastAPI's shape ({loc, msg, type}); it is declared with
// the strict JSON reader that produces it (strictjson.FieldError), so the connection_config rules need no HTTP.
type FieldError = strictjson.FieldError

// FieldError.Type values (strictjson's).
const (
	FieldMissing        = strictjson.FieldMissing
	FieldExtraForbidden = strictjson.FieldExtraForbidden
	FieldTypeError      = strictjson.FieldTypeError
	FieldValueError     = strictjson.FieldValueError
	FieldJSONInvalid    = strictjson.FieldJSONInvalid
)
