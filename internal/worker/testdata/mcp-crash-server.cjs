// A stdio MCP server, on the official TypeScript SDK, whose tools let the
// tests make it misbehave: "crash" exits the process in the middle of the
// call; "add-tool" registers a new tool and announces it with
// notifications/tools/list_changed; "whoami" returns the process id, so a
// test can tell a restarted server from the first one.
// Run with NODE_PATH pointing at the node_modules that hold the SDK.
const { Server } = require("@modelcontextprotocol/sdk/server/index.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { ListToolsRequestSchema, CallToolRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

const obj = (props, required) => ({ type: "object", properties: props || {}, required: required || [] });
const tools = [
  { name: "crash", description: "Exits the server in the middle of the call.", inputSchema: obj() },
  { name: "whoami", description: "Returns the server's process id.", inputSchema: obj() },
  { name: "add-tool", description: "Adds a tool named NAME that echoes its args.", inputSchema: obj({ name: { type: "string" } }, ["name"]) },
];
const added = new Set();

const server = new Server({ name: "crash-server", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const { name, arguments: args } = req.params;
  switch (name) {
    case "crash":
      process.stderr.write("crash-server: exiting on purpose in the middle of a call\n");
      setTimeout(() => process.exit(3), 10);
      return new Promise(() => {});
    case "whoami":
      return { content: [{ type: "text", text: String(process.pid) }] };
    case "add-tool":
      if (!added.has(args.name)) {
        added.add(args.name);
        tools.push({ name: args.name, description: "Echoes its args (added while running).", inputSchema: obj({ text: { type: "string" } }) });
        await server.sendToolListChanged();
      }
      return { content: [{ type: "text", text: "added " + args.name }] };
    default:
      if (added.has(name)) {
        return { content: [{ type: "text", text: JSON.stringify(args) }], structuredContent: { echoed: args } };
      }
      return { content: [{ type: "text", text: "unknown tool " + name }], isError: true };
  }
});
server.connect(new StdioServerTransport());
