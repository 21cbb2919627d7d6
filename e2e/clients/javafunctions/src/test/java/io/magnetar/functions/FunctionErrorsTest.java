package io.magnetar.functions;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;

import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.common.functions.FunctionConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The errors the admin client sees, with Pulsar's status codes: 400 for a
 * config the worker refuses (and for a tenant or namespace that does not
 * exist), 404 for a component that does not exist. None of these starts an
 * instance.
 */
@Timeout(60)
class FunctionErrorsTest extends FunctionsTestBase {
    @Test
    void classNotInJar() throws Exception {
        String jar = examplesJar();
        String name = unique("no-class");
        FunctionConfig c = function(name, "org.example.NoSuchFunction", topic("in"), topic("out"), 1);
        assertAdminError(400, "must be in class path", () -> admin.functions().createFunction(c, jar));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.functions().getFunction(tenant, namespace, name));
        assertEquals(List.of(), admin.functions().getFunctions(tenant, namespace));
    }

    @Test
    void unknownFunction() {
        String name = unique("nobody");
        assertNotFound(() -> admin.functions().getFunction(tenant, namespace, name));
        assertNotFound(() -> admin.functions().getFunctionStatus(tenant, namespace, name));
        assertNotFound(() -> admin.functions().getFunctionStatus(tenant, namespace, name, 0));
        assertNotFound(() -> admin.functions().getFunctionStats(tenant, namespace, name));
        assertNotFound(() -> admin.functions().deleteFunction(tenant, namespace, name));
        assertNotFound(() -> admin.functions().stopFunction(tenant, namespace, name));
        assertNotFound(() -> admin.functions().triggerFunction(tenant, namespace, name, null, "x", null));
        assertNotFound(() -> admin.functions().getFunctionState(tenant, namespace, name, "k"));
    }

    @Test
    void unknownConnectors() {
        String name = unique("nothing");
        assertNotFound(() -> admin.sources().getSource(tenant, namespace, name));
        assertNotFound(() -> admin.sources().getSourceStatus(tenant, namespace, name));
        assertNotFound(() -> admin.sources().deleteSource(tenant, namespace, name));
        assertNotFound(() -> admin.sinks().getSink(tenant, namespace, name));
        assertNotFound(() -> admin.sinks().getSinkStatus(tenant, namespace, name));
        assertNotFound(() -> admin.sinks().deleteSink(tenant, namespace, name));
    }

    @Test
    void unknownTenantOrNamespace() throws Exception {
        String jar = examplesJar();
        FunctionConfig noTenant = function(unique("f"), EXCLAMATION, topic("in"), topic("out"), 1);
        noTenant.setTenant(unique("no-tenant"));
        assertAdminError(400, "does not exist", () -> admin.functions().createFunction(noTenant, jar));

        FunctionConfig noNamespace = function(unique("f"), EXCLAMATION, topic("in"), topic("out"), 1);
        noNamespace.setNamespace(unique("no-ns"));
        assertAdminError(400, "does not exist", () -> admin.functions().createFunction(noNamespace, jar));
    }

    static void assertNotFound(org.junit.jupiter.api.function.Executable call) {
        PulsarAdminException e = assertThrows(PulsarAdminException.NotFoundException.class, call);
        assertEquals(404, e.getStatusCode());
    }
}
