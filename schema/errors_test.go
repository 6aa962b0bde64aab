package schema

import "testing"

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[Code]int{
		CodeInvalidRequest: 400, CodeUnauthorized: 401, CodeForbidden: 403, CodeNotFound: 404,
		CodeIdempotencyConflict: 422, CodeAlreadyTerminal: 409, CodeLeaseHeld: 409, CodeLeaseLost: 409,
		CodePayloadTooLarge: 413, CodeRateLimited: 429, CodeInternal: 500,
	} {
		if got, ok := HTTPStatus(code); !ok || got != want {
			t.Errorf("HTTPStatus(%s) = %d, %v; want %d", code, got, ok, want)
		}
	}
	if got, ok := HTTPStatus("no_such_code"); ok {
		t.Errorf("HTTPStatus of an unknown code = %d, true; want not ok", got)
	}
}
