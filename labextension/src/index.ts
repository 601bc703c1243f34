/**
 * durable-nb: each durable cell's state in the notebook, and the Durable side panel.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';

import { NotebookDurable } from './notebook';
import { DurablePanel } from './panel';

const ICON = new LabIcon({
  name: 'durable-nb:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><path class="jp-icon3" fill="#616161" ' +
    'd="M12 2 4 5v6c0 5 3.4 9.7 8 11 4.6-1.3 8-6 8-11V5l-8-3zm-1 14-4-4 1.4-1.4 2.6 2.6 5.6-5.6L18 9l-7 7z"/></svg>'
});

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'durable-nb:plugin',
  description: "Shows each durable cell's state and a Durable side panel (run, forks, gates).",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const links = new WeakMap<NotebookPanel, NotebookDurable>();
    // Made on first sight: the tracker may make a notebook current before it says it was added.
    const linkOf = (notebook: NotebookPanel): NotebookDurable => {
      let link = links.get(notebook);
      if (!link) {
        const made = new NotebookDurable(notebook);
        links.set(notebook, made);
        notebook.disposed.connect(() => made.dispose());
        link = made;
      }
      return link;
    };
    tracker.widgetAdded.connect((_, notebook) => void linkOf(notebook));
    const panel = new DurablePanel(tracker, linkOf);
    panel.title.icon = ICON;
    app.shell.add(panel, 'right', { rank: 900 });
  }
};

export default plugin;
