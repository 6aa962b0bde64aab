package app

import (
	_ "embed"
	"encoding/json"
	"errors"
	"strings"
	"sync"
)

// openAPIJSON is the OpenAPI 3 description of the API, served at
// GET /v1/openapi.json. Tests check that every route is described and that
// real requests and answers validate against it.
//
//go:embed openapi.json
var openAPIJSON []byte

var openAPIOnce = sync.OnceValues(func() ([]byte, error) {
	var v map[string]any
	if err := json.Unmarshal(openAPIJSON, &v); err != nil {
		return nil, errors.New("app: the embedded openapi.json is not JSON: " + err.Error())
	}
	return openAPIJSON, nil
})

// openAPIDocument returns the API's OpenAPI description.
func openAPIDocument() ([]byte, error) { return openAPIOnce() }

// OpenAPIDocument returns the OpenAPI 3 description of the API, as
// GET /v1/openapi.json serves it.
func OpenAPIDocument() []byte { return openAPIJSON }

// openAPIOperationID is the operationId openapi.json gives the route
// (method and path pattern), for the API's metrics; "unknown" for a route
// it does not describe (which the OpenAPI tests do not let pass).
func openAPIOperationID(method, pattern string) string {
	if id := openAPIOperationIDs()[strings.ToLower(method)+" "+pattern]; id != "" {
		return id
	}
	return "unknown"
}

// openAPIOperationIDs maps "method pattern" (the method in lower case,
// as openapi.json spells it) to its operationId, read from openapi.json
// once.
var openAPIOperationIDs = sync.OnceValue(func() map[string]string {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	ids := map[string]string{}
	if err := json.Unmarshal(openAPIJSON, &doc); err != nil {
		return ids
	}
	for pattern, ops := range doc.Paths {
		for method, raw := range ops {
			var op struct {
				OperationID string `json:"operationId"`
			}
			if json.Unmarshal(raw, &op) == nil && op.OperationID != "" {
				ids[method+" "+pattern] = op.OperationID
			}
		}
	}
	return ids
})
