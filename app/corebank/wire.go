package corebank

// The core-banking debit API this client speaks (the simulator in package
// corebanksim serves the same):
//
//	POST /v1/debits        Idempotency-Key header + DebitBody → 201 (posted) or
//	                       200 (replay of the same key and body, header
//	                       Idempotent-Replayed: true); 422 DECLINED for a
//	                       decline; 422 IDEMPOTENCY_KEY_REUSED for a key
//	                       reused with another body; 409 REQUEST_IN_PROGRESS
//	                       while an earlier request with the key runs; 202
//	                       {"status":"PENDING"} when accepted to post later; and
//	                       any failure a real bank gives (503, 502, 401, resets)
//	GET  /v1/debits/{key}  status enquiry → 200 {"status":"POSTED","reference"},
//	                       200 {"status":"IN_PROGRESS"}, 200 {"status":"DECLINED",
//	                       "code"}, or 404 {"status":"NOT_FOUND"}
//	GET  /healthz          200 while the API serves
const (
	IdempotencyHeader = "Idempotency-Key"
	ReplayedHeader    = "Idempotent-Replayed"
)

// DebitBody is the JSON body of POST /v1/debits.
type DebitBody struct {
	AccountID  string    `json:"accountId"`
	Amount     MoneyBody `json:"amount"`
	ChargeType string    `json:"chargeType"`
	Narrative  string    `json:"narrative,omitempty"`
}

// MoneyBody is integer minor units and an ISO-4217 code.
type MoneyBody struct {
	Minor    int64  `json:"minor"`
	Currency string `json:"currency"`
}

// DebitResponse is the body of a 200/201.
type DebitResponse struct {
	Reference      string `json:"reference"`
	IdempotencyKey string `json:"idempotencyKey"`
	Status         string `json:"status"`
}

// The states of a status enquiry's answer.
const (
	StatusPosted     = "POSTED"
	StatusInProgress = "IN_PROGRESS"
	StatusDeclined   = "DECLINED"
	StatusNotFound   = "NOT_FOUND"
)

// StatusResponse is the body of GET /v1/debits/{key}.
type StatusResponse struct {
	IdempotencyKey string `json:"idempotencyKey"`
	Status         string `json:"status"`
	Reference      string `json:"reference,omitempty"`
	Code           string `json:"code,omitempty"`
	Message        string `json:"message,omitempty"`
	Error          string `json:"error,omitempty"`
}

// ErrorResponse is the body of every 4xx/5xx.
type ErrorResponse struct {
	Error   string `json:"error"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}
