// rvm debug adapter launcher: runs `<rvm.executable> debug --dap` (stdio).  Everything else,
// the debugger type, snippets, grammars, is declared in package.json.  A launch configuration
// with "debugServer": PORT connects to `rvm debug --dap --port PORT` instead (VS Code's own).
const vscode = require("vscode");

function activate(context) {
  const factory = {
    createDebugAdapterDescriptor(session, executable) {
      const exe = vscode.workspace.getConfiguration("rvm").get("executable") || "rvm";
      const cwd = session.configuration.cwd || (session.workspaceFolder
        ? session.workspaceFolder.uri.fsPath : undefined);
      return new vscode.DebugAdapterExecutable(exe, ["debug", "--dap"], cwd ? { cwd } : {});
    },
  };
  context.subscriptions.push(
    vscode.debug.registerDebugAdapterDescriptorFactory("rvm", factory));
  context.subscriptions.push(vscode.debug.registerDebugConfigurationProvider("rvm", {
    resolveDebugConfiguration(folder, config) {
      // F5 without a launch.json: debug the file in the editor
      if (!config.type && !config.request && !config.name) {
        const editor = vscode.window.activeTextEditor;
        if (editor && ["rasm", "janus"].includes(editor.document.languageId)) {
          config.type = "rvm";
          config.name = "rvm: debug the current file";
          config.request = "launch";
          config.program = "${file}";
          config.stopOnEntry = true;
        }
      }
      if (!config.program) {
        return vscode.window.showInformationMessage("rvm: set \"program\" in the launch "
          + "configuration").then(() => undefined);
      }
      return config;
    },
  }));
}

function deactivate() {}

module.exports = { activate, deactivate };
