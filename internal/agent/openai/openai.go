package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/httpretry"
)

// Config configures a Model.
type Config struct {
	// Model is the model name sent to the server, e.g. "gpt-4.1-mini" or
	// "qwen3:8b". Required.
	Model string
	// BaseURL is the server's API root, e.g. "http://localhost:8000/v1".
	// Empty means the OpenAI API (https://api.openai.com/v1/).
	BaseURL string
	// APIKey is sent as a bearer token. Empty sends none, which local
	// servers usually accept.
	APIKey string
	// Stream selects the streaming API. Defaults to false.
	Stream bool
	// MaxRetries is how often a connection error, 408, 409, 429 or 5xx answer
	// is retried (a stream only before its first delta). Zero means 4; a
	// negative value disables retries.
	MaxRetries int
	// Backoff is the wait before the first retry; each next one doubles, up
	// to 30s (or Backoff, if longer), less up to a quarter at random. A
	// retried answer's Retry-After (seconds or an HTTP-date) or
	// Retry-After-Ms sets the wait instead; one that asks for more than 2
	// minutes is not retried. Zero means 1s.
	Backoff time.Duration
	// Timeout bounds each HTTP attempt, a whole stream included. Zero means
	// no bound other than the request's context.
	Timeout time.Duration
	// HTTPClient sends the requests. Nil means http.DefaultClient.
	HTTPClient *http.Client
	// Temperature, when set, is sent as the sampling temperature. Nil leaves
	// it to the server.
	Temperature *float64
	// Logger receives retry and truncation notices. Nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = defaultMaxRetries
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	if c.Backoff == 0 {
		c.Backoff = defaultBackoff
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.Model == "" {
		return errors.New("model is required")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("timeout %s is negative", c.Timeout)
	}
	if c.Backoff < 0 {
		return fmt.Errorf("backoff %s is negative", c.Backoff)
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) {
		return fmt.Errorf("temperature %g is outside [0, 2]", *c.Temperature)
	}
	return nil
}

// Model is an agent.Model backed by a chat completions server. It is safe
// for concurrent use.
type Model struct {
	cfg  Config
	chat oai.ChatCompletionService
	log  *slog.Logger
	// now reads a Retry-After date against the clock, sleep waits between
	// attempts: seams for tests.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

var _ agent.Model = (*Model)(nil)

// New returns a Model for cfg.
func New(cfg Config) (*Model, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("openai config: %w", err)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With(slog.String("component", "openai"), slog.String("model", cfg.Model))

	// The service is built from explicit options only: oai.NewClient would
	// first apply OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_ORG_ID and friends
	// from the environment, and those could add headers Config never asked for.
	// Retries are Request's: openai-go's own cannot be given a first
	// backoff, nor a clock a test controls.
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.Timeout > 0 {
		opts = append(opts, option.WithRequestTimeout(cfg.Timeout))
	}
	return &Model{cfg: cfg, chat: oai.NewChatCompletionService(opts...), log: log, now: time.Now, sleep: httpretry.Sleep}, nil
}

// Name returns the configured model name.
func (m *Model) Name() string { return m.cfg.Model }

// Request sends the history to the server and returns its answer.
func (m *Model) Request(ctx context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
	params, err := m.params(req)
	if err != nil {
		return agent.ModelResponse{}, fmt.Errorf("build chat completion request: %w", err)
	}
	var resp agent.ModelResponse
	for n := 0; ; n++ {
		var raw *http.Response
		if m.cfg.Stream {
			resp, err = m.stream(ctx, params, req.StreamFunc, &raw)
		} else {
			resp, err = m.complete(ctx, params, &raw)
		}
		if err == nil {
			break
		}
		if n >= m.cfg.MaxRetries || !retryable(ctx, raw, err) {
			return agent.ModelResponse{}, err
		}
		wait, ok := m.retryWait(raw, n)
		if !ok {
			return agent.ModelResponse{}, fmt.Errorf("%w (not retried: the server asks to wait more than %s)", err, maxRetryAfter)
		}
		attrs := []any{slog.Int("attempt", n+1), slog.Duration("wait", wait), slog.String("error", err.Error())}
		if raw != nil {
			attrs = append(attrs, slog.Int("status", raw.StatusCode))
		}
		m.log.WarnContext(ctx, "chat completion attempt failed; retrying", attrs...)
		if err := m.sleep(ctx, wait); err != nil {
			return agent.ModelResponse{}, fmt.Errorf("chat completion: waiting to retry: %w", err)
		}
	}
	if resp.ModelName == "" {
		resp.ModelName = m.cfg.Model
	}
	return resp, nil
}

// complete makes one attempt; raw receives its HTTP response, if one came.
func (m *Model) complete(ctx context.Context, params oai.ChatCompletionNewParams, raw **http.Response) (agent.ModelResponse, error) {
	completion, err := m.chat.New(ctx, params, option.WithResponseInto(raw))
	if err != nil {
		return agent.ModelResponse{}, fmt.Errorf("chat completion: %w", m.apiError(err, *raw))
	}
	resp, err := m.fromCompletion(completion)
	if err != nil {
		return agent.ModelResponse{}, fmt.Errorf("chat completion: %w", err)
	}
	return resp, nil
}

// drain is used where an error response's body is read for its message.
func drain(r io.Reader, limit int64) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, limit))
	return b
}
