// Package mcpserver serves agentfs to coding agents over the Model
// Context Protocol (the official Go SDK, github.com/modelcontextprotocol/
// go-sdk): `agentfs mcp`, started by an agent host (Claude Code's
// .mcp.json, or any MCP client) over stdio.
//
// # What it serves
//
// One workspace: the mount that holds the server's working directory
// (as the CLI finds it), the mount that holds Options.Dir, or the
// session Options.Session names (its daemon while it runs, its store
// once it has ended). Its tools (tools.go) are the workspace's
// operations, described for a model: status, checkpoint,
// list_checkpoints, changes, rewind, branch_create, branch_list,
// run_in_branch, merge_branch, activity, and apply when Options.AllowApply (apply
// writes the user's project, with the CLI's conflict checks).
//
// # Rules
//
// No tool holds a rule of its own: each call runs operations of
// package workspace, through a workspace.Client dialled for that call
// (so that several clients, an agent and a person inspecting, share one
// mount, and an ended session's store is locked only while a call
// runs). Most calls are one operation; status makes four and rewind
// three, each consistent but not together (another client's call may
// come between them). A failed operation is a tool error carrying the
// message the CLI would print; the store is never left half-changed
// (the operations' own guarantee). Paths are relative to the project
// root in every tool, by the workspace's rule. run_in_branch runs
// `agentfs exec -b` with a time limit, as a person would, after the
// checks agentfs exec -s makes (so that its refusals are tool errors);
// the call ends shortly after the command, whatever the command left in
// the background.
package mcpserver
