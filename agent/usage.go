package agent

// Add adds o's counts to u.
func (u *Usage) Add(o Usage) {
	u.Requests += o.Requests
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.ToolCalls += o.ToolCalls
}
