package agent

import (
	"context"
	"errors"
)

// FunctionModel is an offline model whose answers come from fn, for tests
// and demos. fn may call req.StreamFunc (when set) to stream text deltas.
// Responses without a ModelName get name.
func FunctionModel(name string, fn func(ctx context.Context, req ModelRequest) (ModelResponse, error)) Model {
	return &functionModel{name: name, fn: fn}
}

type functionModel struct {
	name string
	fn   func(ctx context.Context, req ModelRequest) (ModelResponse, error)
}

func (m *functionModel) Name() string { return m.name }

func (m *functionModel) Request(ctx context.Context, req ModelRequest) (ModelResponse, error) {
	if m.fn == nil {
		return ModelResponse{}, errors.New("function model has no function")
	}
	resp, err := m.fn(ctx, req)
	if err != nil {
		return ModelResponse{}, err
	}
	if resp.ModelName == "" {
		resp.ModelName = m.name
	}
	return resp, nil
}
