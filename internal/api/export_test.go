package api

// The request bodies the handlers decode, for the test that holds the
// OpenAPI document's request schemas to them.
type (
	StartRunRequest = startRunRequest
	AnswerRequest   = answerRequest
	DecisionBody    = decisionBody
	GrantBody       = grantBody
)
